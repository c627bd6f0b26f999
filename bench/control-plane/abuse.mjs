// Normal traffic alone, then beside abusive requests (docs/api.md "Limits"): p50/p99 of
// GET /healthz and of a normal `shards` query, and what every abusive request was answered.
// The control plane runs in its own process (serve.mjs, embedded database, loopback only);
// this process is the load generator.
//
// Build first (npx nx run control-plane:build), then:
//   node bench/control-plane/abuse.mjs [--seconds 60] [--abusive-rate 20] [--normal-rate 20]
//     [--abusers 4] [--dist apps/control-plane/dist]
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { benchOptions } from '../options.mjs';

const options = benchOptions(import.meta.url, {
  options: {
    seconds: { type: 'string', default: '60', value: 'number', help: 'seconds of each phase' },
    'abusive-rate': {
      type: 'string',
      default: '20',
      value: 'number',
      help: 'abusive requests per second, each abuser',
    },
    'normal-rate': {
      type: 'string',
      default: '20',
      value: 'number',
      help: 'normal requests per second',
    },
    abusers: { type: 'string', default: '4', value: 'whole', help: 'abusive clients' },
    dist: {
      type: 'string',
      default: 'apps/control-plane/dist',
      help: 'the control-plane build (dist folder)',
    },
  },
  example: 'flock /tmp/bench.lock node bench/control-plane/abuse.mjs --seconds 10',
});
const SECONDS = Number(options.seconds);
const ABUSIVE_RATE = Number(options['abusive-rate']);
const NORMAL_RATE = Number(options['normal-rate']);
const ABUSERS = Number(options.abusers);
const dist = resolve(options.dist);

async function post(url, token, query, variables = {}) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  return { status: response.status, body: await response.json() };
}

function nested(levels) {
  let inner = 'id';
  for (let i = 0; i < levels; i++) inner = `team { apiTokens { edges { node { ${inner} } } } }`;
  return `{ me { ${inner} } }`;
}

/** The abusive requests of the issue, each with the code it must get. */
function abusiveRequests(teamId) {
  const usage = (i) =>
    `u${i}: usage(teamId: "${teamId}", from: "2026-01-01T00:00:00Z", to: "2026-02-01T00:00:00Z") { teamId }`;
  return [
    { name: 'deep', query: nested(13), code: 'QUERY_TOO_COMPLEX' },
    {
      name: 'aliases-5000',
      query: `{ ${Array.from({ length: 5000 }, (_, i) => usage(i)).join(' ')} }`,
      // 663 KiB: over the body limit (256 KiB), refused by its length before it is parsed.
      code: 'HTTP 413',
    },
    {
      name: 'aliases-200',
      query: `{ ${Array.from({ length: 200 }, (_, i) => usage(i)).join(' ')} }`,
      code: 'QUERY_TOO_COMPLEX',
    },
    {
      name: 'cost',
      query: `{ shards(first: 500) { edges { node { host { shards(first: 500) { edges { node { id name } } } } } } } }`,
      code: 'QUERY_TOO_COMPLEX',
    },
  ];
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

function summary(samples) {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.at(-1),
  };
}

function rssOf(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)[1]) * 1024;
}

/** Fires `fn` `rate` times a second for `seconds` (open loop); resolves when all answered. */
async function openLoop(rate, seconds, fn) {
  const started = performance.now();
  const pending = [];
  const total = Math.round(rate * seconds);
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    pending.push(fn(i));
  }
  await Promise.all(pending);
}

async function normalTraffic(url, graphqlUrl, token, seconds) {
  const healthz = [];
  const shards = [];
  const failures = [];
  const query = `{ shards(first: 50) { edges { cursor node { id name state image memoryPerGpu { human } gpus { index } team { name } } } pageInfo { hasNextPage endCursor } } }`;
  await Promise.all([
    openLoop(NORMAL_RATE, seconds, async () => {
      const t = performance.now();
      const response = await fetch(`${url}/healthz`);
      await response.text();
      healthz.push(performance.now() - t);
      if (response.status !== 200) failures.push(`healthz ${response.status}`);
    }),
    openLoop(NORMAL_RATE, seconds, async () => {
      const t = performance.now();
      const { status, body } = await post(graphqlUrl, token, query);
      shards.push(performance.now() - t);
      if (status !== 200 || body.errors)
        failures.push(`shards ${status} ${JSON.stringify(body.errors)}`);
    }),
  ]);
  return { healthz: summary(healthz), shards: summary(shards), failures };
}

const dataDir = await mkdtemp(join(os.tmpdir(), 'gpushards-abuse-'));
const serve = fileURLToPath(new URL('./serve.mjs', import.meta.url));
const child = spawn(process.execPath, [serve], {
  env: {
    ...process.env,
    GPUSHARDS_BENCH_DIST: dist,
    GPUSHARDS_PORT: '0',
    GPUSHARDS_DATA_DIR: dataDir,
    GPUSHARDS_HOST_OFFLINE_SECONDS: '86400',
  },
  stdio: ['ignore', 'pipe', 'inherit'],
});
try {
  const url = await new Promise((resolveUrl, reject) => {
    child.once('exit', (code) => reject(new Error(`control plane exited with ${code}`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (line.includes('control plane listening')) resolveUrl(JSON.parse(line).url);
    });
  });
  const graphqlUrl = `${url}/graphql`;
  const admin = (await readFile(join(dataDir, 'admin-token'), 'utf8')).trim();
  const team = (await post(graphqlUrl, admin, `mutation { createTeam(name: "bench") { id } }`)).body
    .data.createTeam.id;
  const token = async (name) =>
    (
      await post(
        graphqlUrl,
        admin,
        `mutation ($t: ID) { createApiToken(teamId: $t, role: VIEWER, name: "${name}") { secret } }`,
        { t: team },
      )
    ).body.data.createApiToken.secret;
  const normalToken = await token('portal');
  const abusers = [];
  for (let i = 0; i < ABUSERS; i++) abusers.push(await token(`abuser-${i}`));
  const abusive = abusiveRequests(team);

  // Warm up, then normal traffic alone.
  await normalTraffic(url, graphqlUrl, normalToken, 3);
  const rssBefore = rssOf(child.pid);
  const alone = await normalTraffic(url, graphqlUrl, normalToken, SECONDS);

  // The same beside abusive traffic.
  const answered = {};
  const wrong = [];
  let rssMax = rssOf(child.pid);
  const sampler = setInterval(() => {
    rssMax = Math.max(rssMax, rssOf(child.pid));
  }, 250);
  const [underAbuse] = await Promise.all([
    normalTraffic(url, graphqlUrl, normalToken, SECONDS),
    openLoop(ABUSIVE_RATE, SECONDS, async (i) => {
      const request = abusive[i % abusive.length];
      const { status, body } = await post(graphqlUrl, abusers[i % abusers.length], request.query);
      const code = body.errors?.[0]?.extensions?.code ?? `HTTP ${status}`;
      const key = `${request.name} → ${code}`;
      answered[key] = (answered[key] ?? 0) + 1;
      if (code !== request.code && code !== 'RATE_LIMITED') wrong.push(key);
    }),
  ]);
  clearInterval(sampler);
  const health = await fetch(`${url}/healthz`);

  const row = (name, a, b) =>
    `| ${name} | ${a.p50.toFixed(1)} | ${a.p99.toFixed(1)} | ${b.p50.toFixed(1)} | ${b.p99.toFixed(1)} | ${(b.p99 / a.p99).toFixed(2)} |`;
  console.log(
    `\n${SECONDS} s per phase; normal: ${NORMAL_RATE}/s /healthz + ${NORMAL_RATE}/s shards; abusive: ${ABUSIVE_RATE}/s from ${ABUSERS} tokens\n`,
  );
  console.log(
    '| request | alone p50 ms | alone p99 ms | under abuse p50 ms | under abuse p99 ms | p99 ratio |',
  );
  console.log('| --- | --- | --- | --- | --- | --- |');
  console.log(row('GET /healthz', alone.healthz, underAbuse.healthz));
  console.log(row('shards(first: 50)', alone.shards, underAbuse.shards));
  console.log(`\nabusive requests answered: ${JSON.stringify(answered)}`);
  console.log(`abusive requests with another answer: ${wrong.length}`);
  console.log(
    `normal requests failed: alone ${alone.failures.length}, under abuse ${underAbuse.failures.length}`,
  );
  console.log(
    `server RSS: ${(rssBefore / 2 ** 20).toFixed(0)} MiB before, at most ${(rssMax / 2 ** 20).toFixed(0)} MiB under abuse; /healthz after: ${health.status}`,
  );
  if (wrong.length > 0 || underAbuse.failures.length > 0 || health.status !== 200)
    process.exitCode = 1;
} finally {
  child.kill('SIGTERM');
  await new Promise((r) => child.once('exit', r));
  await rm(dataDir, { recursive: true, force: true });
}

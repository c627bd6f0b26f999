// createShard through the GraphQL endpoint on PostgreSQL, 1,000 registered hosts × 8 GPUs:
// closed-loop throughput and latency, then open-loop latency at a fixed rate.
// Placement and commit only: agent commands are recorded in memory, nothing is launched.
//
// Build first (npx nx run control-plane:build), then:
//   node bench/control-plane/create-shard.mjs [--seconds 10] [--concurrency 64] [--rates 50,100,200]
//     [--teams 100] [--processes 1] [--pool 10] [--dist apps/control-plane/dist]
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';

const { values: options } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    concurrency: { type: 'string', default: '64' },
    rates: { type: 'string', default: '50,100,200' },
    teams: { type: 'string', default: '100' },
    processes: { type: 'string', default: '1' },
    pool: { type: 'string', default: '10' },
    dist: { type: 'string', default: 'apps/control-plane/dist' },
  },
});
const SECONDS = Number(options.seconds);
const CONCURRENCY = Number(options.concurrency);
const RATES = options.rates.split(',').map(Number);
const TEAMS = Number(options.teams);
const PROCESSES = Number(options.processes);
const HOSTS = 1000;
const GPUS_PER_HOST = 8;
const GiB = 2 ** 30;
const MiB = 2 ** 20;
const dist = resolve(options.dist);

const { startPostgres, createTestDatabase } = await import(`${dist}/testing/index.js`);
const { createControlPlane } = await import(`${dist}/control-plane.js`);
const { FleetService } = await import(`${dist}/fleet/fleet.service.js`);

const CREATE = `mutation ($input: CreateShardInput!) { createShard(input: $input) { id hostId } }`;

async function graphql(url, query, variables, token) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  return response.json();
}

function must(body) {
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

function registerRequest(i) {
  const hostId = `host-${String(i).padStart(4, '0')}`;
  return {
    protocolVersion: 1,
    hostId,
    host: {
      hostId,
      name: hostId,
      labels: { zone: `zone-${i % 4}` },
      agentVersion: 'bench',
      driverVersion: '550.54',
      cudaVersion: '12.4',
      simulated: true,
      contextOverheadBytes: 512 * MiB,
    },
    gpus: Array.from({ length: GPUS_PER_HOST }, (_, index) => ({
      uuid: `GPU-${hostId}-${index}`,
      index,
      model: 'NVIDIA H100 80GB HBM3',
      totalBytes: 80 * GiB,
      usedBytes: 0,
    })),
    runningShards: [],
  };
}

/** The fleet, teams and tokens, through a control plane in this process that then stops. */
async function setUp(database, dataDir) {
  const silent = new Writable({ write: (_chunk, _encoding, done) => done() });
  const setup = await createControlPlane({
    dataDir,
    database,
    hostOfflineSeconds: 86_400,
    port: 0,
    logLevel: 'silent',
    operatorOutput: silent,
  });
  try {
    const fleet = setup.app.get(FleetService);
    for (let i = 0; i < HOSTS; i += 10) {
      await Promise.all(
        Array.from({ length: 10 }, (_, k) => fleet.registerHost(registerRequest(i + k))),
      );
    }
    const admin = (await readFile(join(dataDir, 'admin-token'), 'utf8')).trim();
    const tokens = [];
    for (let i = 0; i < TEAMS; i++) {
      const { createTeam } = must(
        await graphql(
          setup.graphqlUrl,
          `
            mutation ($n: String!) {
              createTeam(name: $n) {
                id
              }
            }
          `,
          { n: `team-${i}` },
          admin,
        ),
      );
      must(
        await graphql(
          setup.graphqlUrl,
          `
            mutation ($t: ID!) {
              setQuotaPolicy(
                teamId: $t
                input: { maxTotal: "1000t", maxShards: 100000, maxPerShard: "1t" }
              ) {
                id
              }
            }
          `,
          { t: createTeam.id },
          admin,
        ),
      );
      const { createApiToken } = must(
        await graphql(
          setup.graphqlUrl,
          `
            mutation ($t: ID!) {
              createApiToken(teamId: $t, role: MEMBER, name: "bench") {
                secret
              }
            }
          `,
          { t: createTeam.id },
          admin,
        ),
      );
      tokens.push(createApiToken.secret);
    }
    return tokens;
  } finally {
    await setup.close();
  }
}

/** `node dist/main.js` on the database; resolves with its GraphQL URL. */
async function startServer(databaseUrl, dataDir, poolSize) {
  const child = spawn(process.execPath, [join(dist, 'main.js')], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      GPUSHARDS_PORT: '0',
      GPUSHARDS_DATA_DIR: dataDir,
      GPUSHARDS_DATABASE_POOL_SIZE: String(poolSize),
      // No agents heartbeat here: hosts must not go OFFLINE during the run.
      GPUSHARDS_HOST_OFFLINE_SECONDS: '86400',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise((resolveUrl, reject) => {
    child.once('exit', (code) => reject(new Error(`control plane exited with ${code}`)));
    lines.on('line', (line) => {
      if (line.includes('control plane listening')) resolveUrl(JSON.parse(line).url);
    });
  });
  return { child, graphqlUrl: `${url}/graphql` };
}

/** The floor: an authenticated query that reads one row (HTTP, GraphQL, token lookup). */
function meOne(servers, tokens) {
  const n = sequence++;
  const started = performance.now();
  return graphql(
    servers[n % servers.length].graphqlUrl,
    '{ me { id } }',
    {},
    tokens[n % tokens.length],
  ).then((body) => ({
    ms: performance.now() - started,
    ok: !body.errors,
    code: body.errors?.[0]?.extensions?.code,
  }));
}

let sequence = 0;
function createOne(servers, tokens) {
  const n = sequence++;
  const server = servers[n % servers.length];
  const token = tokens[n % tokens.length];
  const started = performance.now();
  return graphql(
    server.graphqlUrl,
    CREATE,
    { input: { name: `s-${n}`, image: 'ghcr.io/bench/worker:1', memoryPerGpu: '1g' } },
    token,
  ).then((body) => {
    const ms = performance.now() - started;
    if (body.errors) return { ms, ok: false, code: body.errors[0]?.extensions?.code };
    return { ms, ok: true };
  });
}

async function closedLoop(servers, tokens, seconds, concurrency, call = createOne) {
  const results = [];
  const deadline = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) results.push(await call(servers, tokens));
    }),
  );
  return { results, elapsed: (performance.now() - started) / 1000 };
}

async function openLoop(servers, tokens, seconds, rate) {
  const pending = [];
  const started = performance.now();
  const total = Math.round(seconds * rate);
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(createOne(servers, tokens));
  }
  const results = await Promise.all(pending);
  return { results, elapsed: (performance.now() - started) / 1000 };
}

function summary(name, { results, elapsed }) {
  const ok = results.filter((r) => r.ok);
  const ms = ok.map((r) => r.ms).sort((a, b) => a - b);
  const at = (q) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))] ?? NaN;
  const failures = {};
  for (const r of results) if (!r.ok) failures[r.code] = (failures[r.code] ?? 0) + 1;
  return {
    case: name,
    requests: results.length,
    placed: ok.length,
    failures: JSON.stringify(failures),
    'placed/s': Math.round(ok.length / elapsed),
    'p50 ms': at(0.5).toFixed(1),
    'p99 ms': at(0.99).toFixed(1),
    'max ms': (ms.at(-1) ?? NaN).toFixed(1),
  };
}

const server = await startPostgres();
const database = await createTestDatabase('postgres', { server });
await database.prisma.close();
const dataDir = await mkdtemp(join(os.tmpdir(), 'gpushards-bench-'));
const servers = [];
try {
  const setupStarted = performance.now();
  const tokens = await setUp(database.config, dataDir);
  console.log(
    `set up ${HOSTS} hosts × ${GPUS_PER_HOST} GPUs and ${TEAMS} teams in ${Math.round(performance.now() - setupStarted)} ms`,
  );
  for (let i = 0; i < PROCESSES; i++) {
    servers.push(await startServer(database.config.url, dataDir, Number(options.pool)));
  }
  await closedLoop(servers, tokens, 2, CONCURRENCY);
  const rows = [];
  rows.push(
    summary(
      `reference: { me { id } }, ${CONCURRENCY} in flight`,
      await closedLoop(servers, tokens, SECONDS / 2, CONCURRENCY, meOne),
    ),
  );
  rows.push(
    summary(
      `closed loop, ${CONCURRENCY} in flight`,
      await closedLoop(servers, tokens, SECONDS, CONCURRENCY),
    ),
  );
  for (const rate of RATES) {
    rows.push(summary(`open loop, ${rate} req/s`, await openLoop(servers, tokens, SECONDS, rate)));
  }
  console.log(
    `${os.cpus().length} × ${os.cpus()[0]?.model}, Node ${process.version}, ${PROCESSES} control-plane process(es), pool ${options.pool}, load average ${os
      .loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
  console.table(rows);
} finally {
  for (const { child } of servers) child.kill('SIGTERM');
  await Promise.all(
    servers.map(
      ({ child }) => new Promise((r) => (child.exitCode === null ? child.once('exit', r) : r())),
    ),
  );
  await database.cleanup();
  await server.stop();
  await rm(dataDir, { recursive: true, force: true });
}

// The load generator of create-shard.mjs, in its own process (forked; talks over IPC) so that
// its CPU is measured apart from the server's. Plain node:http with a keep-alive agent (a real
// client keeps its connections).
import http from 'node:http';
import { performance } from 'node:perf_hooks';

const CREATE = `mutation ($input: CreateShardInput!) { createShard(input: $input) { id hostId } }`;
const ME = '{ me { id } }';

let agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
let sequence = 0;

function post(url, body, token) {
  return new Promise((resolve, reject) => {
    const payload = Buffer.from(JSON.stringify(body));
    const request = http.request(
      url,
      {
        method: 'POST',
        agent,
        headers: {
          'content-type': 'application/json',
          'content-length': payload.length,
          authorization: `Bearer ${token}`,
        },
      },
      (response) => {
        const chunks = [];
        response.on('data', (chunk) => chunks.push(chunk));
        response.on('end', () => {
          try {
            resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
          } catch (error) {
            reject(error);
          }
        });
        response.on('error', reject);
      },
    );
    request.on('error', reject);
    request.end(payload);
  });
}

function one(urls, tokens, operation) {
  const n = sequence++;
  const url = urls[n % urls.length];
  const token = tokens[n % tokens.length];
  const body =
    operation === 'me'
      ? { query: ME, variables: {} }
      : {
          query: CREATE,
          variables: {
            input: {
              name: `s-${process.pid}-${n}`,
              image: 'ghcr.io/bench/worker:1',
              memoryPerGpu: '1g',
            },
          },
        };
  const started = performance.now();
  return post(url, body, token).then(
    (answer) => ({
      ms: performance.now() - started,
      ok: !answer.errors,
      code: answer.errors?.[0]?.extensions?.code,
    }),
    (error) => ({ ms: performance.now() - started, ok: false, code: error.code ?? 'CLIENT' }),
  );
}

async function closedLoop({ urls, tokens, seconds, concurrency, operation }) {
  const results = [];
  const deadline = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) results.push(await one(urls, tokens, operation));
    }),
  );
  return { results, elapsed: (performance.now() - started) / 1000 };
}

async function openLoop({ urls, tokens, seconds, rate, operation }) {
  const pending = [];
  const started = performance.now();
  const total = Math.round(seconds * rate);
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(one(urls, tokens, operation));
  }
  const results = await Promise.all(pending);
  return { results, elapsed: (performance.now() - started) / 1000 };
}

process.on('message', async (job) => {
  if (job.keepAlive === false) agent = new http.Agent({ keepAlive: false, maxSockets: 256 });
  const cpu = process.cpuUsage();
  const run = job.rate === undefined ? closedLoop(job) : openLoop(job);
  const { results, elapsed } = await run;
  const used = process.cpuUsage(cpu);
  process.send({
    ms: results.map((r) => (r.ok ? r.ms : -1)),
    failures: results.filter((r) => !r.ok).map((r) => r.code ?? 'UNKNOWN'),
    elapsed,
    cpuMs: (used.user + used.system) / 1000,
  });
});

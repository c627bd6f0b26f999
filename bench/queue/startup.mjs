// Restart to ready on PostgreSQL with 10,000 shards in the database: 1,000 hosts × 8 GPUs, 8,000
// RUNNING shards (one per GPU, a reservation each) and --pending PENDING shards behind them,
// written once into a template database. Each round, each build (--dists) gets a fresh copy:
// its control plane (`node dist/main.js`, no agents) is started, made ready, killed with
// SIGKILL and started again; the time from the second spawn to the first 200 from /readyz is
// the restart-to-ready time (the process's own start-up included: module loading, migrations
// check, the fleet cache's read, the first admission pass over the queue). With --profile the
// restarted process writes a V8 CPU profile of its start into --profile-dir.
//   node bench/queue/startup.mjs [--dists apps/control-plane/dist,/tmp/before/apps/control-plane/dist]
//        [--labels after,before] [--rounds 3] [--pending 2000] [--profile-dir /tmp/startup-prof]
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { insertFullFleetWithQueue } from '../fleet-rows.mjs';
import { cpuOf } from '../proc-cpu.mjs';

const { values: options } = parseArgs({
  options: {
    dists: { type: 'string', default: 'apps/control-plane/dist' },
    labels: { type: 'string' },
    rounds: { type: 'string', default: '3' },
    pending: { type: 'string', default: '2000' },
    'profile-dir': { type: 'string' },
  },
});
const dists = options.dists.split(',').map((dist) => resolve(dist));
const labels = options.labels?.split(',') ?? dists;
const { startPostgres, createTestDatabase } = await import(`${dists[0]}/testing/index.js`);

async function writeFleet(url) {
  const sql = new pg.Client({ connectionString: url });
  await sql.connect();
  try {
    await insertFullFleetWithQueue(sql, {
      hosts: 1000,
      gpusPerHost: 8,
      pending: Number(options.pending),
    });
    await sql.query('ANALYZE');
  } finally {
    await sql.end();
  }
}

function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/** Spawns the control plane; resolves with the ms from spawn to the first 200 from /readyz. */
async function startAndWait(dist, env, extraArgs = []) {
  const child = spawn(process.execPath, [...extraArgs, join(dist, 'main.js')], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise((resolveExit) =>
    child.on('exit', (code, signal) => resolveExit(signal ?? code)),
  );
  const t0 = performance.now();
  const url = `http://127.0.0.1:${env.GPUSHARDS_PORT}/readyz`;
  for (;;) {
    const ended = await Promise.race([
      exited,
      new Promise((r) => setTimeout(() => r(undefined), 10)),
    ]);
    if (ended !== undefined) throw new Error(`control plane exited (${ended}): ${stderr}`);
    try {
      const response = await fetch(url);
      if (response.status === 200) {
        // Its CPU until then (every thread: V8's compiler threads too), from /proc: what the
        // start costs whatever else the machine runs; the wall time mostly measures the wait
        // for a core on a loaded one.
        return { child, exited, ms: performance.now() - t0, cpuMs: cpuOf(child.pid) * 1000 };
      }
    } catch {
      // not listening yet
    }
  }
}

const server = await startPostgres({ settings: { fsync: 'on' } });
const template = await createTestDatabase('postgres', { server });
await template.prisma.close();
let copies = 0;

try {
  const setup = performance.now();
  await writeFleet(template.config.url);
  console.log(`fleet and queue written in ${((performance.now() - setup) / 1000).toFixed(1)} s`);
  const rows = [];
  for (let round = 1; round <= Number(options.rounds); round++) {
    for (const [i, dist] of dists.entries()) {
      const name = `startup_bench_${process.pid}_${copies++}`;
      const admin = new pg.Client({ connectionString: server.url });
      await admin.connect();
      await admin.query(
        `CREATE DATABASE ${name} TEMPLATE "${template.config.url.split('/').pop()}"`,
      );
      await admin.end();
      const dataDir = await mkdtemp(join(os.tmpdir(), 'gpushards-startup-bench-'));
      const env = {
        DATABASE_URL: server.urlFor(name),
        GPUSHARDS_DATA_DIR: dataDir,
        GPUSHARDS_PORT: String(await freePort()),
        GPUSHARDS_NO_AGENTS: 'true',
        GPUSHARDS_LOG_LEVEL: 'warn',
      };
      try {
        const first = await startAndWait(dist, env);
        first.child.kill('SIGKILL');
        await first.exited;
        const profiling = options['profile-dir'] !== undefined;
        const again = await startAndWait(
          dist,
          profiling ? { ...env, PROFILE_START_DIR: resolve(options['profile-dir']) } : env,
          profiling
            ? ['--import', fileURLToPath(new URL('./profile-start.mjs', import.meta.url))]
            : [],
        );
        again.child.kill(profiling ? 'SIGUSR2' : 'SIGTERM');
        await again.exited;
        const row = {
          build: labels[i],
          round,
          load: os.loadavg()[0].toFixed(1),
          'first start ms': first.ms.toFixed(0),
          'first start CPU ms': first.cpuMs.toFixed(0),
          'restart to ready ms': again.ms.toFixed(0),
          'restart CPU ms': again.cpuMs.toFixed(0),
        };
        rows.push(row);
        console.log(JSON.stringify(row));
      } finally {
        await rm(dataDir, { recursive: true, force: true });
        const drop = new pg.Client({ connectionString: server.url });
        await drop.connect();
        await drop.query(`DROP DATABASE ${name} WITH (FORCE)`);
        await drop.end();
      }
    }
  }
  console.log(`${os.cpus().length} × ${os.cpus()[0]?.model}, Node ${process.version}`);
  console.table(rows);
} finally {
  await template.cleanup().catch(() => undefined);
  await server.stop?.().catch(() => undefined);
}

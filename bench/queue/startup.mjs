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
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { freePort, startControlPlane } from '../control-plane-process.mjs';
import { insertFullFleetWithQueue } from '../fleet-rows.mjs';
import { copyOfTemplate, printRows } from '../rounds.mjs';
import { benchOptions, buildOptions } from '../options.mjs';

const options = benchOptions(import.meta.url, {
  options: {
    ...buildOptions('apps/control-plane/dist', 'control-plane'),
    rounds: {
      type: 'string',
      default: '3',
      value: 'count',
      help: 'rounds; each starts and restarts every build',
    },
    pending: {
      type: 'string',
      default: '2000',
      value: 'whole',
      help: 'PENDING shards behind the 8,000 RUNNING ones',
    },
    'profile-dir': {
      type: 'string',
      meta: 'DIR',
      help: 'the restarted process writes a V8 CPU profile of its start here',
    },
  },
  example:
    'flock /tmp/bench.lock node bench/queue/startup.mjs --dists apps/control-plane/dist,/work/before/apps/control-plane/dist --labels after,before --rounds 3',
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

const server = await startPostgres({ settings: { fsync: 'on' } });
const template = await createTestDatabase('postgres', { server });
await template.prisma.close();

try {
  const setup = performance.now();
  await writeFleet(template.config.url);
  console.log(`fleet and queue written in ${((performance.now() - setup) / 1000).toFixed(1)} s`);
  const rows = [];
  for (let round = 1; round <= Number(options.rounds); round++) {
    for (const [i, dist] of dists.entries()) {
      const copy = await copyOfTemplate(server, template, 'startup_bench');
      const dataDir = await mkdtemp(join(os.tmpdir(), 'gpushards-startup-bench-'));
      const env = {
        DATABASE_URL: copy.url,
        GPUSHARDS_DATA_DIR: dataDir,
        GPUSHARDS_PORT: String(await freePort()),
        GPUSHARDS_NO_AGENTS: 'true',
        GPUSHARDS_LOG_LEVEL: 'warn',
      };
      try {
        const first = await startControlPlane(dist, env);
        first.child.kill('SIGKILL');
        await first.exited;
        const profiling = options['profile-dir'] !== undefined;
        const again = await startControlPlane(
          dist,
          profiling ? { ...env, PROFILE_START_DIR: resolve(options['profile-dir']) } : env,
          {
            nodeArgs: profiling
              ? ['--import', fileURLToPath(new URL('./profile-start.mjs', import.meta.url))]
              : [],
          },
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
        await copy.drop();
      }
    }
  }
  printRows(rows);
} finally {
  await template.cleanup().catch(() => undefined);
  await server.stop?.().catch(() => undefined);
}

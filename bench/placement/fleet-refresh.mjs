// The fleet cache's periodic refresh (FleetCache.refreshReservations, every
// FLEET_REFRESH_INTERVAL_MS on each replica) on 1,000 hosts × 8 GPUs on a throwaway PostgreSQL
// (fsync on). Each build (--dists) has a database of its own on that server, migrated with its
// own tree's migrations (the prisma folder three levels above the dist), the same fleet written
// into each. Each round, each build runs in a process of its own, builds alternating: it reads
// the whole fleet once, then for each --changes count c,
// --refreshes times: "another replica" (a pg client of this bench) changes c GPUs' reserved
// bytes in one committed statement, then the cache refreshes. Only the refresh is measured:
//
//   cp µs       CPU of this process (process.cpuUsage) during the refresh
//   pg µs       CPU of the PostgreSQL backend that served it (/proc/<pid>/schedstat: the
//               pool has one connection here, so one backend serves every read)
//   bytes       what this process received from its sockets (the refresh's answer; the
//               writer's client is idle meanwhile)
//   wall µs     the refresh's wall time
//
// each a median over the refreshes. After each refresh every changed GPU's reserved bytes in
// the cache is compared with what the writer committed (a wrong one aborts the run).
//
// Then the write side (what the change feed's trigger and index cost every reservation change):
// --writes single-GPU reservation changes, one autocommit UPDATE each, as a placement's
// conditional update; the writer's backend CPU (schedstat) and the WAL per change
// (pg_current_wal_lsn).
//
// --without-feed-index also runs the first build on a database of its own whose index on
// gpu.reservations_changed_xid is dropped (the design not taken: reservation changes stay HOT
// updates, and PostgreSQL scans every GPU row at each read), labelled "<label>-index".
//
// Build first (npx nx build control-plane), then:
//   node bench/placement/fleet-refresh.mjs [--dists apps/control-plane/dist,/tmp/before/apps/control-plane/dist]
//        [--labels after,before] [--rounds 3] [--refreshes 200] [--changes 0,8,80,800]
import { readFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { printResult, runForResult } from '../child-result.mjs';
import { insertHosts } from '../fleet-rows.mjs';
import { quantile } from '../quantile.mjs';
import { benchOptions, buildOptions } from '../options.mjs';

const options = benchOptions(import.meta.url, {
  options: {
    ...buildOptions('apps/control-plane/dist', 'control-plane'),
    rounds: { type: 'string', default: '3', value: 'count', help: 'rounds; each runs every build' },
    refreshes: {
      type: 'string',
      default: '200',
      value: 'count',
      help: 'refreshes per --changes count',
    },
    changes: {
      type: 'string',
      default: '0,8,80,800',
      value: 'counts',
      help: 'GPUs changed before each refresh, one run per count',
    },
    writes: {
      type: 'string',
      default: '2000',
      value: 'count',
      help: 'single-GPU reservation changes of the write side',
    },
    'without-feed-index': {
      type: 'boolean',
      default: false,
      help: 'also the first build without the change feed index, labelled "<label>-index"',
    },
    'run-dist': { type: 'string', internal: true },
    'run-db': { type: 'string', internal: true },
    'run-prisma': { type: 'string', internal: true },
  },
  example:
    'flock /tmp/bench.lock node bench/placement/fleet-refresh.mjs --dists apps/control-plane/dist,/work/before/apps/control-plane/dist --labels after,before',
});
const HOSTS = 1000;
const GPUS_PER_HOST = 8;
const GiB = 2 ** 30;
const MiB = 2 ** 20;
const REFRESHES = Number(options.refreshes);
const WRITES = Number(options.writes);
const CHANGES = options.changes.split(',').map(Number);
const dists = options.dists.split(',').map((dist) => resolve(dist));
const labels = options.labels?.split(',') ?? [...dists];
/** Whether each run's database loses the index on gpu.reservations_changed_xid. */
const unindexed = dists.map(() => false);
if (options['without-feed-index']) {
  dists.push(dists[0]);
  labels.push(`${labels[0]}-index`);
  unindexed.push(true);
}
/** A build's own prisma folder: <tree>/apps/control-plane/dist → <tree>/prisma. */
const prismaDirOf = (dist) => resolve(dist, '../../../prisma');

/** CPU nanoseconds a process has run (first field of /proc/<pid>/schedstat). */
function runNs(pid) {
  return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
}

/** Bytes this process's sockets have received ('data' events counted as they are emitted). */
let receivedBytes = 0;
const emit = net.Socket.prototype.emit;
net.Socket.prototype.emit = function (event, ...args) {
  if (event === 'data') receivedBytes += args[0].length;
  return emit.call(this, event, ...args);
};

const cpuUs = () => {
  const usage = process.cpuUsage();
  return usage.user + usage.system;
};

async function writeFleet(url) {
  const sql = new pg.Client({ connectionString: url });
  await sql.connect();
  try {
    await insertHosts(sql, HOSTS, 512 * MiB);
    // Half of each GPU reserved, some compute shares held: the values a busy fleet has.
    await sql.query(
      `INSERT INTO gpu (uuid, host_id, index, model, total_bytes, reserved_bytes, used_bytes,
                        guaranteed_compute_permille, updated_at)
       SELECT 'GPU-' || host.id || '-' || i, host.id, i, 'NVIDIA H100 80GB HBM3', $1, $2, 0,
              CASE WHEN i % 2 = 0 THEN 250 ELSE 0 END, now()
         FROM host, generate_series(0, $3 - 1) AS i`,
      [String(80 * GiB), String(40 * GiB), GPUS_PER_HOST],
    );
    await sql.query('VACUUM ANALYZE');
  } finally {
    await sql.end();
  }
}

async function runOnce(dist, database, prismaDir) {
  const { PrismaService } = await import(`${dist}/database/prisma.service.js`);
  const { prismaFolderAt } = await import(`${dist}/database/migrations/migration-files.js`);
  const { FleetCache } = await import(`${dist}/placement/fleet-cache.js`);
  const { QueueSignal } = await import(`${dist}/placement/queue-signal.js`);
  const silent = {
    child: () => silent,
    error: (...args) => console.error(...args),
    warn: () => undefined,
    info: () => undefined,
    debug: () => undefined,
  };
  const prisma = await PrismaService.open({ ...database, poolSize: 1 }, prismaFolderAt(prismaDir));
  const writer = new pg.Client({ connectionString: database.url });
  await writer.connect();
  const result = {};
  try {
    const [{ pid }] = await prisma.direct.$queryRaw`SELECT pg_backend_pid() AS pid`;
    const cache = new FleetCache(prisma, new QueueSignal(), silent);
    const t0 = performance.now();
    await cache.refreshedSince(performance.now());
    result.wholeReadMs = performance.now() - t0;
    const gpus = new Map();
    for (const host of cache.hosts()) for (const gpu of host.gpus) gpus.set(gpu.uuid, gpu);
    const uuids = [...gpus.keys()];
    if (uuids.length !== HOSTS * GPUS_PER_HOST) throw new Error(`${uuids.length} GPUs cached`);
    let step = 0;
    for (const c of CHANGES) {
      const samples = { cp: [], pg: [], bytes: [], wall: [] };
      for (let r = 0; r < REFRESHES; r++) {
        let changed = [];
        if (c > 0) {
          const start = (step++ * 7919) % uuids.length;
          const picked = Array.from({ length: c }, (_, i) => uuids[(start + i) % uuids.length]);
          const { rows } = await writer.query(
            `UPDATE gpu SET reserved_bytes = reserved_bytes + $2
              WHERE uuid = ANY($1::text[]) RETURNING uuid, reserved_bytes::float8 AS reserved`,
            [picked, String(step % 2 === 0 ? -MiB : MiB)],
          );
          changed = rows;
        }
        const cp0 = cpuUs();
        const pg0 = runNs(pid);
        const io0 = receivedBytes;
        const w0 = performance.now();
        await cache.refreshReservations();
        const w1 = performance.now();
        samples.cp.push(cpuUs() - cp0);
        samples.pg.push((runNs(pid) - pg0) / 1000);
        samples.bytes.push(receivedBytes - io0);
        samples.wall.push((w1 - w0) * 1000);
        for (const row of changed) {
          const seen = gpus.get(row.uuid)?.reservedBytes;
          if (seen !== row.reserved) {
            throw new Error(`${row.uuid}: cache has ${seen}, committed ${row.reserved}`);
          }
        }
      }
      result[c] = Object.fromEntries(
        Object.entries(samples).map(([key, values]) => [key, quantile(values, 0.5)]),
      );
    }
    const {
      rows: [{ pid: writerPid }],
    } = await writer.query('SELECT pg_backend_pid() AS pid');
    const lsn = async () =>
      (await writer.query(`SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS at`)).rows[0].at;
    const wal0 = Number(await lsn());
    const cpu0 = runNs(writerPid);
    const w0 = performance.now();
    for (let i = 0; i < WRITES; i++) {
      await writer.query(
        `UPDATE gpu SET reserved_bytes = reserved_bytes + $2
          WHERE uuid = $1 AND reserved_bytes + $2 <= floor(total_bytes * overcommit_ratio)`,
        [uuids[(i * 7919) % uuids.length], String(i % 2 === 0 ? MiB : -MiB)],
      );
    }
    result.write = {
      pgUs: (runNs(writerPid) - cpu0) / 1000 / WRITES,
      walBytes: (Number(await lsn()) - wal0) / WRITES,
      wallUs: ((performance.now() - w0) * 1000) / WRITES,
    };
  } finally {
    await writer.end();
    await prisma.close();
  }
  return result;
}

if (options['run-dist'] !== undefined) {
  const result = await runOnce(
    options['run-dist'],
    JSON.parse(options['run-db']),
    options['run-prisma'],
  );
  printResult(result);
  process.exit(0);
}

const { startPostgres, createTestDatabase } = await import(`${dists[0]}/testing/index.js`);
const { prismaFolderAt } = await import(`${dists[0]}/database/migrations/migration-files.js`);
const server = await startPostgres();
const databases = [];
for (const [i, dist] of dists.entries()) {
  const database = await createTestDatabase('postgres', {
    server,
    prismaFolder: prismaFolderAt(prismaDirOf(dist)),
  });
  if (unindexed[i]) {
    await database.prisma.$executeRawUnsafe('DROP INDEX gpu_reservations_changed_xid_idx');
  }
  await database.prisma.close();
  databases.push(database);
}

function runChild(dist, database) {
  return runForResult(fileURLToPath(import.meta.url), [
    ...['--run-dist', dist, '--run-db', JSON.stringify(database.config)],
    ...['--run-prisma', prismaDirOf(dist)],
    ...['--refreshes', String(REFRESHES), '--changes', options.changes],
    ...['--writes', String(WRITES)],
  ]);
}

try {
  for (const database of databases) await writeFleet(database.config.url);
  const rows = [];
  const writes = [];
  for (let round = 1; round <= Number(options.rounds); round++) {
    for (const [i, dist] of dists.entries()) {
      const load = os.loadavg()[0].toFixed(1);
      const r = await runChild(dist, databases[i]);
      writes.push({
        build: labels[i],
        round,
        load,
        'pg µs/change': r.write.pgUs.toFixed(1),
        'WAL bytes/change': Math.round(r.write.walBytes),
        'wall µs/change': Math.round(r.write.wallUs),
      });
      for (const c of CHANGES) {
        const row = {
          build: labels[i],
          round,
          load,
          'changed/refresh': c,
          'cp µs': Math.round(r[c].cp),
          'pg µs': Math.round(r[c].pg),
          bytes: r[c].bytes,
          'wall µs': Math.round(r[c].wall),
          'whole read ms': Math.round(r.wholeReadMs),
        };
        rows.push(row);
        console.log(JSON.stringify(row));
      }
    }
  }
  console.log('medians over the refreshes of each run:');
  console.table(rows);
  console.log(`${WRITES} single-GPU reservation changes, one autocommit UPDATE each:`);
  console.table(writes);
} finally {
  for (const database of databases) await database.cleanup();
  await server.stop();
}

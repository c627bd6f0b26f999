// The pending queue on PostgreSQL (durable: fsync on), 1,000 hosts × 8 GPUs (80 GiB each), the
// fleet full (one 79 GiB shard per GPU) and 10,000 shards PENDING behind it. One control plane
// in this process at a time; agent commands are recorded in memory, nothing is launched.
//
// Several builds side by side (--dists, e.g. this tree's and a copy of main's): the fleet and
// queue are written once into a template database; each round, each build gets a fresh copy
// of it (CREATE DATABASE ... TEMPLATE) and runs every case, builds alternating.
//
//   latency   a shard is deleted through ShardMutationsService (the freeing event) and the time
//             until the next pending shard's placement has committed (its PLACED event,
//             published after commit) is taken; one at a time, --events times. The delete's own
//             transaction is inside the time. Also the CPU per event of this process (the
//             control plane) and of PostgreSQL (postmaster and backends, from /proc), which the
//             load of a shared machine distorts far less than wall time.
//   api turnover  --bulk shards deleted at once (8 in flight: the pool has 10 connections, and more waited past Prisma's 2 s limit for a transaction to start on this loaded machine): placed from the queue per second
//             until as many were placed. Bounded by the deletes' own transactions.
//   bulk turnover --bulk shards end in one transaction (as when a host is drained or goes
//             offline: EXITED, reservations released); the control plane learns of it from its
//             fleet cache's read of the GPUs, which this bench asks for at once; placed per
//             second from that commit until --bulk more are placed.
//
// Build first (npx nx run-many -t build), then:
//   node bench/queue/admission.mjs [--dists apps/control-plane/dist,/tmp/before/apps/control-plane/dist]
//        [--labels after,before] [--rounds 2] [--events 40] [--bulk 300] [--pending 10000] [--no-fsync]
//        [--pin-control-plane 0 --pin-postgres 1]  (CPU lists for taskset: each build's process
//        on some cores, PostgreSQL's postmaster and backends on others, so the two do not
//        take each other's core or move between cores; the machine's other processes still
//        share them)
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import pg from 'pg';
import { printResult, runForResult } from '../child-result.mjs';
import { insertFullFleetWithQueue } from '../fleet-rows.mjs';
import { benchOptions, buildOptions } from '../options.mjs';
import { childrenOf, pin, postgresCpu, postmasterOf } from '../proc-cpu.mjs';
import { quantile } from '../quantile.mjs';
import { copyOfTemplate, printRows } from '../rounds.mjs';

const options = benchOptions(import.meta.url, {
  options: {
    events: {
      type: 'string',
      default: '40',
      value: 'count',
      help: 'freeing events, one at a time (latency)',
    },
    bulk: {
      type: 'string',
      default: '300',
      value: 'count',
      help: 'shards ended at once (turnover)',
    },
    pending: {
      type: 'string',
      default: '10000',
      value: 'whole',
      help: 'PENDING shards behind the full fleet',
    },
    rounds: { type: 'string', default: '2', value: 'count', help: 'rounds; each runs every build' },
    ...buildOptions('apps/control-plane/dist', 'control-plane'),
    // One build's run in a process of its own (two builds' modules cannot share one).
    'run-dist': { type: 'string', internal: true },
    'run-db': { type: 'string', internal: true },
    'run-postmaster': { type: 'string', internal: true },
    'no-fsync': { type: 'boolean', default: false, help: 'PostgreSQL without fsync' },
    'pin-control-plane': {
      type: 'string',
      meta: 'CPUS',
      help: "taskset CPU list for each build's process",
    },
    'pin-postgres': {
      type: 'string',
      meta: 'CPUS',
      help: "taskset CPU list for PostgreSQL's postmaster and backends",
    },
    statements: {
      type: 'boolean',
      default: false,
      help: 'also the SQL statements per freeing event (pg_stat_statements), the most frequent, with mean planning and execution ms',
    },
  },
  example:
    'flock /tmp/bench.lock node bench/queue/admission.mjs --dists apps/control-plane/dist,/work/before/apps/control-plane/dist --labels after,before --events 20 --bulk 100',
});
const HOSTS = 1000;
const GPUS_PER_HOST = 8;
const PENDING = Number(options.pending);
const EVENTS = Number(options.events);
const BULK = Number(options.bulk);
const ROUNDS = Number(options.rounds);
const dists = options.dists.split(',').map((dist) => resolve(dist));
const labels = options.labels?.split(',') ?? dists;

process.env.GPUSHARDS_QUEUE_SWEEP_MS = '0'; // signals only: the sweep would blur the timing
const { startPostgres, createTestDatabase } = await import(`${dists[0]}/testing/index.js`);

/**
 * With BENCH_NODE_ARGS='--import bench/profile-window.mjs' and PROFILE_WINDOW_DIR set, starts
 * or writes a CPU profile of this process (profile-window.mjs's SIGUSR2); else nothing.
 */
async function profileWindow() {
  if (!process.env.PROFILE_WINDOW_DIR) return;
  process.kill(process.pid, 'SIGUSR2');
  await new Promise((resolveSoon) => setTimeout(resolveSoon, 200));
}

const nodeCpu = () => {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
};

/** The fleet full and the queue behind it, written by SQL as the control plane writes them. */
async function writeFleet(url) {
  const sql = new pg.Client({ connectionString: url });
  await sql.connect();
  try {
    await insertFullFleetWithQueue(sql, {
      hosts: HOSTS,
      gpusPerHost: GPUS_PER_HOST,
      pending: PENDING,
    });
    if (options.statements) await sql.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await sql.query('ANALYZE');
  } finally {
    await sql.end();
  }
}

async function runOnce(dist, database, pgPid) {
  const url = database.url;
  const { createControlPlane } = await import(`${dist}/control-plane.js`);
  const { ShardMutationsService } = await import(`${dist}/shards/shard-mutations.service.js`);
  const { ShardEventBus } = await import(`${dist}/events/shard-event-bus.js`);
  const { QueueService } = await import(`${dist}/queue/queue.service.js`);
  const { FleetCache } = await import(`${dist}/placement/fleet-cache.js`);
  // The CPU of this process while an admission pass runs (QueueService's pass, the same
  // private method in every build compared so far): the admission's own cost per event, apart
  // from the delete's transaction and the bench's driving (in the latency case one event at a
  // time, so little else runs meanwhile).
  const passCpu = { us: 0, systemUs: 0, passes: 0 };
  const pass = QueueService.prototype.pass;
  if (typeof pass === 'function') {
    QueueService.prototype.pass = async function (...args) {
      const before = process.cpuUsage();
      try {
        return await pass.apply(this, args);
      } finally {
        const used = process.cpuUsage(before);
        passCpu.us += used.user + used.system;
        passCpu.systemUs += used.system;
        passCpu.passes++;
      }
    };
  }
  const dataDir = await mkdtemp(join(os.tmpdir(), 'gpushards-queue-bench-'));
  const silent = new Writable({ write: (_chunk, _encoding, done) => done() });
  const cp = await createControlPlane({
    dataDir,
    database: { ...database, poolSize: 10 },
    hostOfflineSeconds: 86_400,
    port: 0,
    logLevel: process.env.BENCH_LOG ?? 'silent',
    operatorOutput: silent,
  });
  const sql = new pg.Client({ connectionString: url });
  await sql.connect();
  const result = {};
  try {
    const cache = cp.app.get(FleetCache);
    await cache.refreshedSince(performance.now());
    const queue = cp.app.get(QueueService);
    const warm = performance.now();
    await queue.admitNow();
    result.firstPassMs = performance.now() - warm;

    const mutations = cp.app.get(ShardMutationsService);
    const bus = cp.app.get(ShardEventBus);
    const caller = {
      tokenId: '00000000-0000-0000-0000-000000000000',
      tokenName: 'bench',
      role: 'ADMIN',
      teamId: null,
    };
    let onPlaced = () => undefined;
    let placedFromQueue = 0;
    /** When the shard being deleted was published as gone (after its commit): the room freed. */
    let freeing;
    let freedAt;
    bus.subscribe((event) => {
      if (event.shard?.id === freeing && event.state === 'DELETED') freedAt = performance.now();
      if (event.previousState === 'PENDING' && event.state === 'PLACED') {
        placedFromQueue++;
        onPlaced();
      }
      return false;
    });
    const placedUntil = (goal) =>
      new Promise((resolvePlaced) => {
        onPlaced = () => {
          if (placedFromQueue >= goal) resolvePlaced();
        };
      });
    const { rows: running } = await sql.query(
      `SELECT id::text FROM shard WHERE state = 'RUNNING' ORDER BY name LIMIT $1`,
      [EVENTS + 2 * BULK],
    );
    const victims = running.map((r) => r.id);

    // Latency: one freeing event at a time.
    const ms = [];
    const fromFreedMs = [];
    if (options.statements) await sql.query('SELECT pg_stat_statements_reset()');
    await profileWindow(); // starts one, with PROFILE_WINDOW_DIR (bench/profile-window.mjs)
    const cpu0 = { node: nodeCpu(), pg: postgresCpu(pgPid) };
    const pass0 = { ...passCpu };
    for (let i = 0; i < EVENTS; i++) {
      const placed = placedUntil(placedFromQueue + 1);
      freeing = victims[i];
      freedAt = undefined;
      const t0 = performance.now();
      await mutations.delete(caller, victims[i]);
      await placed;
      const t1 = performance.now();
      ms.push(t1 - t0);
      if (freedAt === undefined) throw new Error(`no DELETED event seen for ${victims[i]}`);
      fromFreedMs.push(t1 - freedAt);
    }
    const cpu1 = { node: nodeCpu(), pg: postgresCpu(pgPid) };
    await profileWindow(); // writes it: the latency case alone
    Object.assign(result, {
      p50: quantile(ms, 0.5),
      p99: quantile(ms, 0.99),
      max: Math.max(...ms),
      freedP50: quantile(fromFreedMs, 0.5),
      freedP99: quantile(fromFreedMs, 0.99),
      nodeCpuMsPerEvent: ((cpu1.node - cpu0.node) * 1000) / EVENTS,
      pgCpuMsPerEvent: ((cpu1.pg - cpu0.pg) * 1000) / EVENTS,
      passCpuMsPerEvent: (passCpu.us - pass0.us) / 1000 / EVENTS,
      passSystemMsPerEvent: (passCpu.systemUs - pass0.systemUs) / 1000 / EVENTS,
      passesPerEvent: (passCpu.passes - pass0.passes) / EVENTS,
    });
    if (options.statements) {
      const { rows } = await sql.query(
        `SELECT calls, total_plan_time AS plan, total_exec_time AS exec, query FROM pg_stat_statements
          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          ORDER BY calls DESC`,
      );
      const total = rows.reduce((sum, row) => sum + Number(row.calls), 0);
      result.statementsPerEvent = (total / EVENTS).toFixed(1);
      result.topStatements = rows
        .slice(0, 15)
        .map((row) => [
          (Number(row.calls) / EVENTS).toFixed(2),
          (row.plan / Number(row.calls)).toFixed(3),
          (row.exec / Number(row.calls)).toFixed(3),
          row.query.replace(/\s+/g, ' ').slice(0, 100),
        ]);
    }

    // API turnover: BULK deletes, 8 in flight.
    {
      const start = placedFromQueue;
      const done = placedUntil(start + BULK);
      const t0 = performance.now();
      const bulk = victims.slice(EVENTS, EVENTS + BULK);
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < bulk.length) await mutations.delete(caller, bulk[next++]);
        }),
      );
      result.apiDeletesMs = performance.now() - t0;
      await done;
      result.apiPlacedPerSecond = (placedFromQueue - start) / ((performance.now() - t0) / 1000);
    }

    // Bulk turnover: BULK shards end in one transaction.
    {
      const bulk = victims.slice(EVENTS + BULK, EVENTS + 2 * BULK);
      const start = placedFromQueue;
      const done = placedUntil(start + BULK);
      const cpuBefore = { node: nodeCpu(), pg: postgresCpu(pgPid) };
      await sql.query(
        `WITH ended AS (
           UPDATE shard SET state = 'EXITED', stopped_at = now(), updated_at = now()
            WHERE id = ANY($1::uuid[]) RETURNING id),
         released AS (
           UPDATE shard_gpu SET released_at = now()
            WHERE shard_id IN (SELECT id FROM ended) AND released_at IS NULL
           RETURNING gpu_uuid, reserved_bytes)
         UPDATE gpu SET reserved_bytes = gpu.reserved_bytes - released.reserved_bytes
           FROM released WHERE gpu.uuid = released.gpu_uuid`,
        [bulk],
      );
      const t0 = performance.now();
      await cache.refreshReservations(); // finds the room freed, wakes the queue
      await done;
      const seconds = (performance.now() - t0) / 1000;
      const cpuAfter = { node: nodeCpu(), pg: postgresCpu(pgPid) };
      result.bulkPlacedPerSecond = (placedFromQueue - start) / seconds;
      result.bulkCpuMsPerPlacement =
        ((cpuAfter.node - cpuBefore.node + cpuAfter.pg - cpuBefore.pg) * 1000) / BULK;
    }
    const { rows: counts } = await sql.query(
      `SELECT state::text, count(*)::int FROM shard GROUP BY state ORDER BY state`,
    );
    result.states = Object.fromEntries(counts.map((r) => [r.state, r.count]));
  } finally {
    await sql.end();
    await cp.close();
    await rm(dataDir, { recursive: true, force: true });
  }
  return result;
}

if (options['run-dist'] !== undefined) {
  const result = await runOnce(
    options['run-dist'],
    JSON.parse(options['run-db']),
    Number(options['run-postmaster']),
  );
  printResult(result);
  process.exit(0);
}

const server = await startPostgres({
  settings: {
    fsync: options['no-fsync'] ? 'off' : 'on',
    full_page_writes: options['no-fsync'] ? 'off' : 'on',
    ...(options.statements
      ? {
          shared_preload_libraries: 'pg_stat_statements',
          'pg_stat_statements.track': 'all',
          'pg_stat_statements.track_planning': 'on',
        }
      : {}),
  },
});
const pgPid = postmasterOf(server.dir);
if (options['pin-postgres'] !== undefined) {
  pin(pgPid, options['pin-postgres']);
  for (const pid of childrenOf(pgPid)) pin(pid, options['pin-postgres']);
}
const template = await createTestDatabase('postgres', { server });
await template.prisma.close();

/** One build's run, in a child process, on a fresh copy of the template. */
async function runChild(dist) {
  const copy = await copyOfTemplate(server, template, 'queue_bench');
  try {
    const database = { ...template.config, url: copy.url };
    return await runForResult(
      fileURLToPath(import.meta.url),
      [
        ...['--run-dist', dist, '--run-db', JSON.stringify(database)],
        ...['--run-postmaster', String(pgPid)],
        ...['--events', String(EVENTS), '--bulk', String(BULK)],
        ...(options.statements ? ['--statements'] : []),
      ],
      {
        nodeArgs: (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean),
        onSpawn: (child) => pin(child.pid, options['pin-control-plane']),
      },
    );
  } finally {
    await copy.drop();
  }
}

try {
  const setup = performance.now();
  await writeFleet(template.config.url);
  console.log(`fleet and queue written in ${((performance.now() - setup) / 1000).toFixed(1)} s`);
  const rows = [];
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [i, dist] of dists.entries()) {
      const load = os.loadavg()[0].toFixed(1);
      const r = await runChild(dist);
      const row = {
        build: labels[i],
        round,
        load,
        'first pass ms': r.firstPassMs.toFixed(0),
        'p50 ms': r.p50.toFixed(1),
        'p99 ms': r.p99.toFixed(1),
        'max ms': r.max.toFixed(1),
        'freed→placed p50 / p99 ms': `${r.freedP50.toFixed(1)} / ${r.freedP99.toFixed(1)}`,
        'cp cpu ms/event': r.nodeCpuMsPerEvent.toFixed(1),
        'pass cpu ms/event': `${r.passCpuMsPerEvent.toFixed(1)} (sys ${r.passSystemMsPerEvent.toFixed(1)}; ${r.passesPerEvent.toFixed(2)} passes)`,
        'pg cpu ms/event': r.pgCpuMsPerEvent.toFixed(1),
        'api placed/s': Math.round(r.apiPlacedPerSecond),
        'api deletes ms': r.apiDeletesMs.toFixed(0),
        'bulk placed/s': Math.round(r.bulkPlacedPerSecond),
        'bulk cpu ms/placed': r.bulkCpuMsPerPlacement.toFixed(2),
        ...(r.statementsPerEvent === undefined ? {} : { 'SQL/event': r.statementsPerEvent }),
      };
      rows.push(row);
      console.log(JSON.stringify({ ...row, states: r.states }));
      if (r.topStatements !== undefined) {
        console.log(`${labels[i]}: statements per freeing event, the most frequent`);
        console.table(
          r.topStatements.map(([perEvent, planMs, execMs, query]) => ({
            perEvent,
            'plan ms': planMs,
            'exec ms': execMs,
            query,
          })),
        );
      }
    }
  }
  printRows(
    rows,
    `; --events ${EVENTS} --bulk ${BULK} --pending ${PENDING}` +
      (options['pin-control-plane'] === undefined
        ? ''
        : ` --pin-control-plane ${options['pin-control-plane']}`) +
      (options['pin-postgres'] === undefined ? '' : ` --pin-postgres ${options['pin-postgres']}`),
  );
} finally {
  await template.cleanup().catch(() => undefined);
  await server.stop();
}

// The pending queue on PostgreSQL (durable: fsync on), 1,000 hosts × 8 GPUs (80 GiB each), the
// fleet full (one 79 GiB shard per GPU) and 10,000 shards PENDING behind it. One control plane
// in this process; agent commands are recorded in memory, nothing is launched.
//
//   latency   a shard is deleted (the freeing event) and the time until the next pending shard's
//             placement has committed (its PLACED event, published after commit) is taken;
//             one at a time, --events times. The delete's own transaction is inside the time.
//   turnover  --bulk shards are deleted at once (64 in flight) and the time until as many pending
//             shards are placed is taken: shards placed per second.
//
// Build first (npx nx run-many -t build), then:
//   node bench/queue/admission.mjs [--events 200] [--bulk 2000] [--pending 10000] [--no-fsync]
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import pg from 'pg';

const { values: options } = parseArgs({
  options: {
    events: { type: 'string', default: '200' },
    bulk: { type: 'string', default: '2000' },
    pending: { type: 'string', default: '10000' },
    dist: { type: 'string', default: 'apps/control-plane/dist' },
    'no-fsync': { type: 'boolean', default: false },
  },
});
const HOSTS = 1000;
const GPUS_PER_HOST = 8;
const PENDING = Number(options.pending);
const EVENTS = Number(options.events);
const BULK = Number(options.bulk);
const GiB = 2 ** 30;
const MiB = 2 ** 20;
const dist = resolve(options.dist);

process.env.GPUSHARDS_QUEUE_SWEEP_MS = '0'; // signals only: the sweep would blur the timing
const { startPostgres, createTestDatabase } = await import(`${dist}/testing/index.js`);
const { createControlPlane } = await import(`${dist}/control-plane.js`);
const { AgentReportsService } = await import(`${dist}/fleet/agent-reports.service.js`);
const { ShardMutationsService } = await import(`${dist}/shards/shard-mutations.service.js`);
const { ShardEventBus } = await import(`${dist}/events/shard-event-bus.js`);
const { QueueService } = await import(`${dist}/queue/queue.service.js`);

function registerRequest(i) {
  const hostId = `host-${String(i).padStart(4, '0')}`;
  return {
    protocolVersion: 1,
    hostId,
    host: {
      hostId,
      name: hostId,
      labels: {},
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

const server = await startPostgres({
  settings: {
    fsync: options['no-fsync'] ? 'off' : 'on',
    full_page_writes: options['no-fsync'] ? 'off' : 'on',
  },
});
const database = await createTestDatabase('postgres', { server });
const dataDir = await mkdtemp(join(os.tmpdir(), 'gpushards-queue-bench-'));
const silent = new Writable({ write: (_chunk, _encoding, done) => done() });
const cp = await createControlPlane({
  dataDir,
  database: { ...database.config, poolSize: 10 },
  hostOfflineSeconds: 86_400,
  port: 0,
  logLevel: process.env.BENCH_LOG ?? 'silent',
  operatorOutput: silent,
});
const sql = new pg.Client({ connectionString: database.config.url });
await sql.connect();
try {
  const fleet = cp.app.get(AgentReportsService);
  for (let i = 0; i < HOSTS; i += 10) {
    await Promise.all(
      Array.from({ length: 10 }, (_, k) => fleet.registerHost(registerRequest(i + k))),
    );
  }
  const {
    rows: [team],
  } = await sql.query(
    `INSERT INTO team (id, name) VALUES (gen_random_uuid(), 'bench') RETURNING id`,
  );
  await sql.query(
    `INSERT INTO quota_policy (team_id, max_total_bytes, max_shards, max_bytes_per_shard, updated_at)
     VALUES ($1, $2, 1000000, $3, now())`,
    [team.id, String(2 ** 52), String(2 ** 45)],
  );
  // The fleet full: one 79 GiB shard per GPU (79 GiB + 512 MiB overhead on an 80 GiB GPU),
  // written as createShard writes them (shard PLACED, its reservation, the GPU's reserved bytes).
  const limit = 79 * GiB + 512 * MiB;
  await sql.query(
    `WITH gpus AS (SELECT uuid, host_id, row_number() OVER (ORDER BY uuid) AS n FROM gpu),
          shards AS (
            INSERT INTO shard (id, team_id, name, image, bytes_per_gpu, gpu_count,
                               limit_bytes_per_gpu, state, host_id, updated_at, started_at)
            SELECT gen_random_uuid(), $1, 'full-' || n, 'bench/worker:1', $2, 1, $3, 'RUNNING',
                   host_id, now(), now() - (n || ' seconds')::interval
              FROM gpus RETURNING id, name)
     INSERT INTO shard_gpu (shard_id, gpu_uuid, reserved_bytes, reserved_at)
     SELECT shards.id, gpus.uuid, $3, now() FROM shards JOIN gpus ON shards.name = 'full-' || gpus.n`,
    [team.id, String(79 * GiB), String(limit)],
  );
  await sql.query(`UPDATE gpu SET reserved_bytes = $1`, [String(limit)]);
  // The queue: PENDING shards of 40 GiB (two fit where one full shard ended).
  await sql.query(
    `INSERT INTO shard (id, team_id, name, image, bytes_per_gpu, gpu_count, limit_bytes_per_gpu,
                        state, updated_at, queued_at)
     SELECT gen_random_uuid(), $1, 'pending-' || n, 'bench/worker:1', $2, 1, $2, 'PENDING', now(),
            now() + (n || ' milliseconds')::interval
       FROM generate_series(1, $3) AS n`,
    [team.id, String(40 * GiB), PENDING],
  );
  await sql.query('ANALYZE');
  const cache = cp.app.get((await import(`${dist}/placement/fleet-cache.js`)).FleetCache);
  await cache.refreshedSince(performance.now());
  const queue = cp.app.get(QueueService);
  const warm = performance.now();
  const first = await queue.admitNow();
  console.log(
    `first pass over ${PENDING} pending: ${(performance.now() - warm).toFixed(1)} ms`,
    first,
  );

  const mutations = cp.app.get(ShardMutationsService);
  const bus = cp.app.get(ShardEventBus);
  const admin = {
    tokenId: '00000000-0000-0000-0000-000000000000',
    tokenName: 'bench',
    role: 'ADMIN',
    teamId: null,
  };
  let onPlaced = () => undefined;
  let placedFromQueue = 0;
  bus.subscribe((event) => {
    if (event.previousState === 'PENDING' && event.state === 'PLACED') {
      placedFromQueue++;
      onPlaced();
    }
    return false;
  });
  const { rows: running } = await sql.query(
    `SELECT id::text FROM shard WHERE state = 'RUNNING' ORDER BY random() LIMIT $1`,
    [EVENTS + BULK],
  );
  const victims = running.map((r) => r.id);

  // Latency: one freeing event at a time.
  const ms = [];
  for (let i = 0; i < EVENTS; i++) {
    const target = placedFromQueue + 1;
    const placed = new Promise((resolvePlaced) => {
      onPlaced = () => {
        if (placedFromQueue >= target) resolvePlaced();
      };
    });
    const t0 = performance.now();
    await mutations.delete(admin, victims[i]);
    await placed;
    ms.push(performance.now() - t0);
    // Let the pass that placed it finish (its second placement, if any) before the next event.
    await queue.admitNow();
  }
  ms.sort((a, b) => a - b);
  const at = (q) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))];

  // Turnover: BULK shards end at once; count placements from the queue until BULK more.
  const start = placedFromQueue;
  const goal = start + BULK;
  const done = new Promise((resolveDone) => {
    onPlaced = () => {
      if (placedFromQueue >= goal) resolveDone();
    };
  });
  const t0 = performance.now();
  const bulk = victims.slice(EVENTS, EVENTS + BULK);
  let next = 0;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < bulk.length) await mutations.delete(admin, bulk[next++]);
    }),
  );
  const deletedMs = performance.now() - t0;
  await done;
  const seconds = (performance.now() - t0) / 1000;
  const { rows: counts } = await sql.query(
    `SELECT state::text, count(*)::int FROM shard GROUP BY state ORDER BY state`,
  );
  console.table([
    {
      case: `freeing event → placement committed (${EVENTS} events)`,
      'p50 ms': at(0.5).toFixed(1),
      'p99 ms': at(0.99).toFixed(1),
      'max ms': ms.at(-1).toFixed(1),
    },
  ]);
  console.table([
    {
      case: `turnover: ${BULK} shards end at once`,
      'deletes done ms': deletedMs.toFixed(0),
      placed: placedFromQueue - start,
      'placed/s': Math.round((placedFromQueue - start) / seconds),
    },
  ]);
  console.log(Object.fromEntries(counts.map((r) => [r.state, r.count])));
} finally {
  await sql.end();
  await cp.close();
  await database.cleanup();
  await server.stop();
  await rm(dataDir, { recursive: true, force: true });
}

// Hosts lost at once, on PostgreSQL with a large fleet written by SQL: --hosts hosts of
// --gpus-per-host GPUs, --shards-per-host RUNNING shards each (a reservation on one GPU and a
// compute share each), written once into a template database. Each round, each build (--dists)
// gets a fresh copy and --control-planes control planes of that build (`node dist/main.js`, no
// agents, GPUSHARDS_HOST_OFFLINE_SECONDS=5 so that they sweep every 1.25 s); once they have
// listened for a whole offline period, --lose hosts (spread over the id order) go silent at once
// (their last heartbeat an hour ago; every other host's is a day ahead, so no other host goes
// silent). Reported: the time from the loss to every lost host OFFLINE with nothing reserved on
// its GPUs (the wait for the next sweep included), the CPU of the control planes and of
// PostgreSQL over that window (from /proc), and the checks after it: each lost host marked
// once, its shards LOST with events and audit, every GPU's reserved bytes and compute shares
// equal to its live reservations, no other host OFFLINE. --explain prints the plan of the
// sweep's read of silent hosts.
//   node bench/control-plane/host-loss.mjs [--dists apps/control-plane/dist,/work/before/apps/control-plane/dist]
//        [--labels after,before] [--rounds 2] [--hosts 10000] [--lose 200] [--control-planes 2]
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { freePort, startControlPlane } from '../control-plane-process.mjs';
import { insertFleet } from '../fleet-rows.mjs';
import { cpuOf, postgresCpu, postmasterOf } from '../proc-cpu.mjs';
import { copyOfTemplate, printRows } from '../rounds.mjs';
import { benchOptions, buildOptions } from '../options.mjs';

const options = benchOptions(import.meta.url, {
  options: {
    ...buildOptions('apps/control-plane/dist', 'control-plane'),
    rounds: { type: 'string', default: '2', value: 'count', help: 'rounds; each runs every build' },
    hosts: { type: 'string', default: '10000', value: 'count', help: 'hosts in the fleet' },
    'gpus-per-host': { type: 'string', default: '8', value: 'count', help: 'GPUs per host' },
    'shards-per-host': {
      type: 'string',
      default: '2',
      value: 'whole',
      help: 'RUNNING shards per host, one GPU each (at most --gpus-per-host)',
    },
    lose: {
      type: 'string',
      default: '200',
      value: 'count',
      help: 'hosts that go silent at once (at most --hosts)',
    },
    'control-planes': {
      type: 'string',
      default: '2',
      value: 'count',
      help: 'control planes per build',
    },
    explain: {
      type: 'boolean',
      default: false,
      help: "print the plan of the sweep's read of silent hosts",
    },
  },
  example:
    'flock /tmp/bench.lock node bench/control-plane/host-loss.mjs --hosts 100 --lose 5 --dists apps/control-plane/dist,/work/before/apps/control-plane/dist --labels after,before',
});
const dists = options.dists.split(',').map((dist) => resolve(dist));
const labels = options.labels?.split(',') ?? dists;
const HOSTS = Number(options.hosts);
const LOSE = Number(options.lose);
const SHARDS_PER_HOST = Number(options['shards-per-host']);
const OFFLINE_SECONDS = 5;
const GiB = 2 ** 30;
const { startPostgres, createTestDatabase } = await import(`${dists[0]}/testing/index.js`);

/** The hosts (host-00000 …, online, seen a day ahead), their GPUs and shards. */
async function writeFleet(sql) {
  const teamId = await insertFleet(sql, {
    hosts: HOSTS,
    gpusPerHost: Number(options['gpus-per-host']),
    idDigits: 5,
    heartbeatAheadSeconds: 86_400,
  });
  const limit = 20 * GiB + 512 * 2 ** 20;
  await sql.query(
    `WITH placed AS (
       SELECT gpu.uuid, gpu.host_id FROM gpu WHERE gpu.index < $4
     ), shards AS (
       INSERT INTO shard (id, team_id, name, image, bytes_per_gpu, gpu_count, limit_bytes_per_gpu,
                          state, host_id, updated_at, started_at, compute_share_permille)
       SELECT gen_random_uuid(), $1, 'on-' || uuid, 'bench/worker:1', $2, 1, $3, 'RUNNING',
              host_id, now(), now(), 100
         FROM placed RETURNING id, name)
     INSERT INTO shard_gpu (shard_id, gpu_uuid, reserved_bytes, compute_share_permille, reserved_at)
     SELECT shards.id, placed.uuid, $3, 100, now()
       FROM shards JOIN placed ON shards.name = 'on-' || placed.uuid`,
    [teamId, String(20 * GiB), String(limit), SHARDS_PER_HOST],
  );
  await sql.query(
    `UPDATE gpu SET reserved_bytes = $1, guaranteed_compute_permille = 100 WHERE index < $2`,
    [String(limit), SHARDS_PER_HOST],
  );
  await sql.query('ANALYZE');
}

/** The lost hosts: every (HOSTS / LOSE)th, so that they spread over the id order. */
function lostHostIds() {
  const step = Math.floor(HOSTS / LOSE);
  return Array.from({ length: LOSE }, (_, i) => `host-${String(i * step).padStart(5, '0')}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function checks(sql, lost) {
  const {
    rows: [row],
  } = await sql.query(
    `SELECT
       (SELECT count(*) FROM audit_event WHERE action = 'host.offline')::int AS "hostAudits",
       (SELECT count(DISTINCT target_id) FROM audit_event WHERE action = 'host.offline')::int
         AS "hostsAudited",
       (SELECT count(*) FROM audit_event WHERE action = 'host.offline'
           AND details->>'previousState' = 'ONLINE')::int AS "previousStateOnline",
       (SELECT count(*) FROM audit_event WHERE action = 'shard.lost')::int AS "shardAudits",
       (SELECT count(*) FROM shard_event WHERE state = 'LOST')::int AS "shardEvents",
       (SELECT count(*) FROM shard WHERE state = 'LOST')::int AS "lostShards",
       (SELECT count(*) FROM host WHERE state = 'OFFLINE' AND NOT (id = ANY($1)))::int
         AS "othersOffline",
       (SELECT count(*) FROM gpu LEFT JOIN LATERAL (
          SELECT coalesce(sum(reserved_bytes), 0) AS bytes,
                 coalesce(sum(compute_share_permille), 0) AS permille
            FROM shard_gpu WHERE gpu_uuid = gpu.uuid AND released_at IS NULL) live ON true
         WHERE gpu.reserved_bytes <> live.bytes
            OR gpu.guaranteed_compute_permille <> live.permille)::int AS "gpusOff"`,
    [lost],
  );
  const problems = [];
  if (row.hostAudits !== LOSE || row.hostsAudited !== LOSE)
    problems.push(`${row.hostAudits} host.offline for ${row.hostsAudited} hosts`);
  const shards = LOSE * SHARDS_PER_HOST;
  for (const key of ['shardAudits', 'shardEvents', 'lostShards'])
    if (row[key] !== shards) problems.push(`${key} ${row[key]} (want ${shards})`);
  if (row.othersOffline > 0) problems.push(`${row.othersOffline} other hosts OFFLINE`);
  if (row.gpusOff > 0) problems.push(`${row.gpusOff} GPUs off their live reservations`);
  return {
    problems,
    previousStateOnline: row.previousStateOnline,
  };
}

const server = await startPostgres({ settings: { fsync: 'on' } });
const template = await createTestDatabase('postgres', { server });
await template.prisma.close();
const postmaster = postmasterOf(server.dir);

try {
  const setup = performance.now();
  {
    const sql = new pg.Client({ connectionString: template.config.url });
    await sql.connect();
    try {
      await writeFleet(sql);
      if (options.explain) {
        const { rows } = await sql.query(
          `EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM host
            WHERE state <> 'OFFLINE' AND (last_heartbeat_at IS NULL OR last_heartbeat_at < now())
            ORDER BY id`,
        );
        console.log(rows.map((r) => r['QUERY PLAN']).join('\n'));
      }
    } finally {
      await sql.end();
    }
  }
  console.log(
    `${HOSTS} hosts, ${HOSTS * SHARDS_PER_HOST} shards written in ${((performance.now() - setup) / 1000).toFixed(1)} s`,
  );
  const lost = lostHostIds();
  const rows = [];
  for (let round = 1; round <= Number(options.rounds); round++) {
    for (const [i, dist] of dists.entries()) {
      const copy = await copyOfTemplate(server, template, 'host_loss_bench');
      const sql = new pg.Client({ connectionString: copy.url });
      await sql.connect();
      const dataDirs = [];
      const planes = [];
      try {
        for (let c = 0; c < Number(options['control-planes']); c++) {
          const dataDir = await mkdtemp(join(os.tmpdir(), 'gpushards-host-loss-bench-'));
          dataDirs.push(dataDir);
          planes.push(
            await startControlPlane(dist, {
              DATABASE_URL: copy.url,
              GPUSHARDS_DATA_DIR: dataDir,
              GPUSHARDS_PORT: String(await freePort()),
              GPUSHARDS_NO_AGENTS: 'true',
              GPUSHARDS_LOG_LEVEL: 'error',
              GPUSHARDS_HOST_OFFLINE_SECONDS: String(OFFLINE_SECONDS),
            }),
          );
        }
        // Until every control plane has listened for a whole offline period (it marks nothing
        // before), and a little more for the start-up's work to settle.
        await sleep(OFFLINE_SECONDS * 1000 + 2000);
        const cpuBefore = planes.map((p) => cpuOf(p.child.pid));
        const pgBefore = postgresCpu(postmaster);
        const t0 = performance.now();
        await sql.query(
          `UPDATE host SET last_heartbeat_at = now() - interval '1 hour' WHERE id = ANY($1)`,
          [lost],
        );
        let firstMs;
        for (;;) {
          const {
            rows: [seen],
          } = await sql.query(
            `SELECT (SELECT count(*) FROM host WHERE id = ANY($1) AND state = 'OFFLINE')::int AS offline,
                    (SELECT coalesce(sum(reserved_bytes), 0) FROM gpu WHERE host_id = ANY($1))::bigint AS reserved`,
            [lost],
          );
          if (firstMs === undefined && seen.offline > 0) firstMs = performance.now() - t0;
          if (seen.offline === LOSE && Number(seen.reserved) === 0) break;
          if (performance.now() - t0 > 300_000)
            throw new Error(`not marked in 300 s: ${seen.offline}`);
          await sleep(100);
        }
        const allMs = performance.now() - t0;
        const cpuMs = planes.map((p, k) => (cpuOf(p.child.pid) - cpuBefore[k]) * 1000);
        const pgMs = (postgresCpu(postmaster) - pgBefore) * 1000;
        const checked = await checks(sql, lost);
        const errors = planes
          .map((p) => p.output())
          .join('')
          .split('\n')
          .filter((line) => line.includes('silent host')).length;
        const row = {
          build: labels[i],
          round,
          load: os.loadavg()[0].toFixed(1),
          'loss → first OFFLINE ms': firstMs?.toFixed(0),
          'loss → all marked ms': allMs.toFixed(0),
          'CP CPU ms': cpuMs.map((ms) => ms.toFixed(0)).join(' + '),
          'PG CPU ms': pgMs.toFixed(0),
          'CPU ms / lost host': ((cpuMs.reduce((a, b) => a + b, 0) + pgMs) / LOSE).toFixed(2),
          'hosts not marked (logged)': errors,
          'previousState ONLINE': checked.previousStateOnline,
          checks: checked.problems.length === 0 ? 'clean' : checked.problems.join('; '),
        };
        rows.push(row);
        console.log(JSON.stringify(row));
      } finally {
        for (const plane of planes) {
          plane.child.kill('SIGTERM');
          await plane.exited;
        }
        await sql.end();
        for (const dir of dataDirs) await rm(dir, { recursive: true, force: true });
        await copy.drop();
      }
    }
  }
  printRows(rows);
} finally {
  await template.cleanup().catch(() => undefined);
  await server.stop?.().catch(() => undefined);
}

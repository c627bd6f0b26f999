import 'reflect-metadata';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import pg from 'pg';
import type { Logger } from '../logging/logger.js';
import {
  createTestDatabase,
  startPostgres,
  TEST_DATABASE_KINDS,
  type PostgresServer,
  type TestDatabase,
} from '../testing/index.js';
import { FleetCache } from './fleet-cache.js';
import { readReservations, readWholeFleet } from './fleet-reads.js';
import { QueueSignal } from './queue-signal.js';

/**
 * The fleet cache's change feed (migration 20261127211721_fleet_change_feed) against real
 * databases: the periodic read fetches only what changed, yet misses no commit, whatever order
 * transactions commit in, and whatever the cache applied of its own.
 */

const GiB = 2 ** 30;
const MiB = 2 ** 20;
const HOSTS = 4;
const GPUS_PER_HOST = 2;

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const silent = {
  child: () => silent,
  error: () => undefined,
  warn: () => undefined,
  info: () => undefined,
  debug: () => undefined,
} as unknown as Logger;

const uuidOf = (host: number, index: number) => `GPU-feed-${host}-${index}`;
const ALL_GPUS = Array.from({ length: HOSTS * GPUS_PER_HOST }, (_, i) =>
  uuidOf(Math.floor(i / GPUS_PER_HOST), i % GPUS_PER_HOST),
);

async function openDatabase(kind: (typeof TEST_DATABASE_KINDS)[number]): Promise<TestDatabase> {
  const db = await createTestDatabase(kind, postgres === undefined ? {} : { server: postgres });
  await db.prisma.$executeRawUnsafe(
    `INSERT INTO host (id, name, labels, context_overhead_bytes, updated_at)
     SELECT 'feed-' || n, 'feed-' || n, '{}', ${512 * MiB}, now()
       FROM generate_series(0, ${HOSTS - 1}) AS n`,
  );
  await db.prisma.$executeRawUnsafe(
    `INSERT INTO gpu (uuid, host_id, index, model, total_bytes, updated_at)
     SELECT 'GPU-feed-' || n || '-' || i, 'feed-' || n, i, 'NVIDIA H100 80GB HBM3', ${80 * GiB},
            now()
       FROM generate_series(0, ${HOSTS - 1}) AS n, generate_series(0, ${GPUS_PER_HOST - 1}) AS i`,
  );
  return db;
}

async function newCache(db: TestDatabase, signal = new QueueSignal()): Promise<FleetCache> {
  const cache = new FleetCache(db.prisma, signal, silent);
  await cache.refreshedSince(performance.now());
  return cache;
}

/** Reserved bytes and compute permille of every GPU, as the cache counts them. */
function cachedCounts(cache: FleetCache): Map<string, [number, number]> {
  const counts = new Map<string, [number, number]>();
  for (const host of cache.hosts()) {
    for (const gpu of host.gpus) {
      counts.set(gpu.uuid, [gpu.reservedBytes, gpu.guaranteedComputePermille ?? 0]);
    }
  }
  return counts;
}

/**
 * The cache's index of room names what a look at every GPU of hosts() finds: the ONLINE hosts
 * with a GPU whose memory left reaches the need.
 */
function assertRoomIndexTrue(cache: FleetCache): void {
  for (const need of [1, 10 * GiB, 30 * GiB, 60 * GiB]) {
    const looked = cache
      .hosts()
      .filter(
        (host) =>
          host.state === 'ONLINE' &&
          host.gpus.some(
            (gpu) => gpu.totalBytes - (gpu.unownedBytes ?? 0) - gpu.reservedBytes >= need,
          ),
      );
    assert.deepEqual(cache.roomIndex().hostsThatMayFit(need), looked, `room for ${need} bytes`);
  }
}

/** The same, as the database has committed them. */
async function committedCounts(db: TestDatabase): Promise<Map<string, [number, number]>> {
  const rows = await db.prisma.$queryRawUnsafe<
    { uuid: string; reserved: number; permille: number }[]
  >(
    `SELECT uuid, reserved_bytes::float8 AS reserved, guaranteed_compute_permille AS permille
       FROM gpu ORDER BY uuid`,
  );
  return new Map(rows.map((row) => [row.uuid, [row.reserved, row.permille]]));
}

const reserve = (uuid: string, bytes: number) =>
  `UPDATE gpu SET reserved_bytes = reserved_bytes + ${bytes}
    WHERE uuid = '${uuid}' AND reserved_bytes + ${bytes} >= 0`;

for (const kind of TEST_DATABASE_KINDS) {
  describe(`the fleet cache's change feed on ${kind}`, () => {
    it('the periodic read fetches only the GPUs changed since the last read', async () => {
      const db = await openDatabase(kind);
      try {
        const whole = await readWholeFleet(db.prisma.direct);
        assert.equal(whole.gpus.length, ALL_GPUS.length);
        assert.ok(whole.watermark !== undefined, 'the whole read gives a watermark');
        let read = await readReservations(db.prisma.direct, whole.watermark);
        assert.deepEqual(Object.keys(read.reserved), [], 'nothing changed');
        assert.equal(read.hostsChanged, false);
        await db.prisma.$executeRawUnsafe(reserve(uuidOf(1, 0), GiB));
        await db.prisma.$executeRawUnsafe(
          `UPDATE gpu SET guaranteed_compute_permille = 250 WHERE uuid = '${uuidOf(2, 1)}'`,
        );
        // Heartbeats (used bytes) are no reservation change.
        await db.prisma.$executeRawUnsafe(`UPDATE gpu SET used_bytes = ${GiB}`);
        await db.prisma.$executeRawUnsafe(`UPDATE host SET last_heartbeat_at = now()`);
        read = await readReservations(db.prisma.direct, read.watermark);
        assert.deepEqual(read.reserved, { [uuidOf(1, 0)]: GiB, [uuidOf(2, 1)]: 0 });
        assert.deepEqual(read.compute, { [uuidOf(2, 1)]: 250 });
        assert.equal(read.hostsChanged, false, 'a heartbeat is no host change');
        const next = await readReservations(db.prisma.direct, read.watermark, [uuidOf(3, 0)]);
        assert.deepEqual(Object.keys(next.reserved), [uuidOf(3, 0)], 'only the one to recheck');
        await db.prisma.$executeRawUnsafe(`UPDATE host SET cordoned = true WHERE id = 'feed-0'`);
        const cordoned = await readReservations(db.prisma.direct, next.watermark);
        assert.equal(cordoned.hostsChanged, true);
      } finally {
        await db.cleanup();
      }
    });

    it('a replica told nothing (no NOTIFY, no commit of its own) converges at its next periodic read', async () => {
      const db = await openDatabase(kind);
      try {
        await db.prisma.$executeRawUnsafe(reserve(uuidOf(0, 0), 40 * GiB));
        const signal = new QueueSignal();
        let wakes = 0;
        signal.onFreed(() => wakes++);
        const replica = await newCache(db, signal);
        // Another control plane reserves, resizes and releases: several statements, one
        // transaction among them, one change undone before it commits.
        await db.prisma.$executeRawUnsafe(reserve(uuidOf(0, 0), -40 * GiB));
        await db.prisma.$transaction(async (tx) => {
          await tx.$executeRawUnsafe(reserve(uuidOf(1, 1), 20 * GiB));
          await tx.$executeRawUnsafe(reserve(uuidOf(3, 0), 8 * GiB));
          await tx.$executeRawUnsafe(reserve(uuidOf(3, 0), -8 * GiB));
        });
        await db.prisma.$executeRawUnsafe(
          `UPDATE gpu SET guaranteed_compute_permille = 500 WHERE uuid = '${uuidOf(2, 0)}'`,
        );
        assertRoomIndexTrue(replica);
        await replica.refreshReservations();
        assert.deepEqual(cachedCounts(replica), await committedCounts(db));
        assertRoomIndexTrue(replica);
        assert.equal(wakes, 1, 'the room freed on GPU 0/0 woke the queue');
        await replica.refreshReservations();
        assert.equal(wakes, 1, 'nothing new: no wake');
      } finally {
        await db.cleanup();
      }
    });

    it('a restart reads the whole fleet, changes made while it was down included', async () => {
      const db = await openDatabase(kind);
      try {
        const first = await newCache(db);
        await first.refreshReservations();
        await db.prisma.$executeRawUnsafe(reserve(uuidOf(2, 1), 30 * GiB));
        await db.prisma.$executeRawUnsafe(`UPDATE host SET cordoned = true WHERE id = 'feed-3'`);
        // The first process is gone; a new one starts with nothing but the database.
        const restarted = await newCache(db);
        assert.deepEqual(cachedCounts(restarted), await committedCounts(db));
        assert.equal(restarted.hosts().length, HOSTS);
        assertRoomIndexTrue(restarted);
        await db.prisma.$executeRawUnsafe(reserve(uuidOf(0, 1), 10 * GiB));
        await restarted.refreshReservations();
        assert.deepEqual(cachedCounts(restarted), await committedCounts(db));
      } finally {
        await db.cleanup();
      }
    });

    it('a commit of this process applied after a read that already saw it is read again', async () => {
      const db = await openDatabase(kind);
      try {
        await db.prisma.$executeRawUnsafe(reserve(uuidOf(1, 0), 40 * GiB));
        const cache = await newCache(db);
        // This process releases 10 GiB; its commit lands, a periodic read sees it, and only
        // then does the process apply its own delta (the apply follows the commit by a moment).
        await db.prisma.$executeRawUnsafe(reserve(uuidOf(1, 0), -10 * GiB));
        await cache.refreshReservations();
        cache.applyCommitted([{ uuid: uuidOf(1, 0), bytes: -10 * GiB }]);
        assert.equal(cachedCounts(cache).get(uuidOf(1, 0))![0], 20 * GiB, 'counted twice for now');
        assertRoomIndexTrue(cache);
        // The row is stamped below the watermark now: the feed alone would never bring it back.
        await cache.refreshReservations();
        assert.equal(cachedCounts(cache).get(uuidOf(1, 0))![0], 30 * GiB);
        assert.deepEqual(cachedCounts(cache), await committedCounts(db));
      } finally {
        await db.cleanup();
      }
    });
  });
}

describe('the change feed on PostgreSQL, transactions committing out of order', () => {
  it('an update committed after a later-numbered one was read is still seen', async () => {
    const db = await openDatabase('postgres');
    const [early, late] = [db.config.url!, db.config.url!].map(
      (url) => new pg.Client({ connectionString: url }),
    );
    try {
      await early!.connect();
      await late!.connect();
      const cache = await newCache(db);
      // `early` takes its transaction id first and changes GPU 0/0 ...
      await early!.query('BEGIN');
      await early!.query(reserve(uuidOf(0, 0), 16 * GiB));
      // ... `late`, numbered after it, changes GPU 1/0 and commits first.
      await late!.query(reserve(uuidOf(1, 0), 8 * GiB));
      const {
        rows: [{ late: lateStamp }],
      } = await late!.query(
        `SELECT reservations_changed_xid AS late FROM gpu WHERE uuid = '${uuidOf(1, 0)}'`,
      );
      await cache.refreshReservations();
      assert.equal(cachedCounts(cache).get(uuidOf(1, 0))![0], 8 * GiB);
      assert.equal(cachedCounts(cache).get(uuidOf(0, 0))![0], 0, 'not committed yet');
      await early!.query('COMMIT');
      const {
        rows: [{ early: earlyStamp }],
      } = await late!.query(
        `SELECT reservations_changed_xid AS early FROM gpu WHERE uuid = '${uuidOf(0, 0)}'`,
      );
      assert.ok(
        BigInt(earlyStamp) < BigInt(lateStamp),
        'the row committed last carries the smaller number',
      );
      await cache.refreshReservations();
      assert.equal(cachedCounts(cache).get(uuidOf(0, 0))![0], 16 * GiB);
      assert.deepEqual(cachedCounts(cache), await committedCounts(db));
    } finally {
      await early!.end().catch(() => undefined);
      await late!.end().catch(() => undefined);
      await db.cleanup();
    }
  });

  it('property: after each periodic read the cache equals the database, whatever the commit order', async () => {
    const db = await openDatabase('postgres');
    const CLIENTS = 3;
    const clients = Array.from(
      { length: CLIENTS },
      () => new pg.Client({ connectionString: db.config.url! }),
    );
    try {
      for (const client of clients) await client.connect();
      // A change opens its client's transaction unless `alone` (autocommit); transactions end
      // in any order, several open at once, so rows numbered lower commit after higher ones.
      const step = fc.oneof(
        fc.record({
          op: fc.constant('change' as const),
          client: fc.nat(CLIENTS - 1),
          gpu: fc.nat(ALL_GPUS.length - 1),
          mib: fc.integer({ min: -4096, max: 4096 }),
          permille: fc.integer({ min: -100, max: 100 }),
          alone: fc.boolean(),
        }),
        fc.record({
          op: fc.constantFrom('commit' as const, 'rollback' as const),
          client: fc.nat(CLIENTS - 1),
        }),
        fc.record({ op: fc.constant('refresh' as const) }),
      );
      await fc.assert(
        fc.asyncProperty(
          fc.array(step, { minLength: 4, maxLength: 40, size: 'max' }),
          async (steps) => {
            for (const client of clients) await client.query('ROLLBACK').catch(() => undefined);
            await db.prisma.$executeRawUnsafe(
              'UPDATE gpu SET reserved_bytes = 0, guaranteed_compute_permille = 0',
            );
            const cache = await newCache(db);
            const open = new Set<number>();
            for (const s of [...steps, { op: 'commitAll' as const }, { op: 'refresh' as const }]) {
              if (s.op === 'refresh') {
                await cache.refreshReservations();
                assert.deepEqual(cachedCounts(cache), await committedCounts(db));
              } else if (s.op === 'commitAll') {
                for (const c of open) await clients[c]!.query('COMMIT');
                open.clear();
              } else if (s.op !== 'change') {
                if (open.has(s.client)) await clients[s.client]!.query(s.op.toUpperCase());
                open.delete(s.client);
              } else {
                // Each client changes only its own GPUs: an open transaction's row locks would
                // otherwise make another client's statement wait on this sequential driver.
                const gpu = ALL_GPUS[s.gpu - (s.gpu % CLIENTS) + s.client];
                if (gpu === undefined) continue;
                if (!s.alone && !open.has(s.client)) {
                  await clients[s.client]!.query('BEGIN');
                  open.add(s.client);
                }
                await clients[s.client]!.query(
                  `UPDATE gpu SET reserved_bytes = reserved_bytes + $2,
                        guaranteed_compute_permille = guaranteed_compute_permille + $3
                  WHERE uuid = $1 AND reserved_bytes + $2 >= 0
                    AND guaranteed_compute_permille + $3 BETWEEN 0 AND 1000`,
                  [gpu, s.mib * MiB, s.permille],
                );
              }
            }
          },
        ),
        {
          numRuns: 60,
          // The case that a watermark taken as "everything numbered so far" misses.
          examples: [
            [
              [
                { op: 'change', client: 0, gpu: 0, mib: 100, permille: 0, alone: false },
                { op: 'change', client: 1, gpu: 1, mib: 100, permille: 0, alone: false },
                { op: 'commit', client: 1 },
                { op: 'refresh' },
                { op: 'commit', client: 0 },
                { op: 'refresh' },
              ],
            ],
          ],
        },
      );
    } finally {
      for (const client of clients) await client.end().catch(() => undefined);
      await db.cleanup();
    }
  });
});

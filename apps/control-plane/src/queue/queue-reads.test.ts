import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import {
  createTestDatabase,
  startPostgres,
  TEST_DATABASE_KINDS,
  type PostgresServer,
  type TestDatabase,
} from '../testing/index.js';
import { readPassState, readTeams, type TeamRecord } from './queue-reads.js';
import { ADMISSION_LOCK } from './queue.service.js';

/**
 * What an admission pass reads before it decides, through the SQL functions admission_pass_state
 * and queue_teams (migration 20261129133647_admission_pass_state): the teams with their limits,
 * guarantees and decayed GiB-hours, the reclaims in flight, whether anything is elastic; with the
 * admission lock taken by the same statement.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const GiB = 2 ** 30;
const HOUR_MS = 3_600_000;
const HALF_LIFE_MS = 2 * HOUR_MS;

for (const kind of TEST_DATABASE_KINDS) {
  describe(`what a pass reads on ${kind}`, () => {
    let db: TestDatabase;
    before(async () => {
      db = await createTestDatabase(kind, postgres ? { server: postgres } : {});
    });
    after(async () => {
      await db?.cleanup();
    });

    it('teams (limits, guarantee, decayed GiB-hours), reclaims in flight and elastic shards, the lock taken', async () => {
      const now = new Date('2026-11-29T12:30:00.000Z');
      const limited = randomUUID();
      const open = randomUUID();
      await db.prisma.$executeRaw`
        INSERT INTO team (id, name) VALUES (${limited}::uuid, 'limited'), (${open}::uuid, 'open')`;
      await db.prisma.quotaPolicy.create({
        data: {
          teamId: limited,
          maxTotalBytes: BigInt(640 * GiB),
          maxShards: 12,
          maxBytesPerShard: BigInt(80 * GiB),
          guaranteeBytes: BigInt(160 * GiB),
          guaranteeGpus: 2,
          guaranteeGpuModel: 'H100',
        },
      });
      const running = randomUUID();
      const waiting = randomUUID();
      const victim = randomUUID();
      const stopAt = new Date('2026-11-29T12:29:10.123Z');
      await db.prisma.$executeRaw`
        INSERT INTO shard (id, team_id, name, image, bytes_per_gpu, gpu_count, limit_bytes_per_gpu,
                           state, reclaim_for, updated_at)
        VALUES (${running}::uuid, ${limited}::uuid, 'running', 'example/x:1', ${GiB}::bigint, 1,
                ${GiB}::bigint, 'RUNNING', NULL, ${now}::timestamptz),
               (${waiting}::uuid, ${limited}::uuid, 'waiting', 'example/x:1', ${GiB}::bigint, 1,
                ${GiB}::bigint, 'PENDING', NULL, ${now}::timestamptz),
               (${victim}::uuid, ${open}::uuid, 'victim', 'example/x:1', ${GiB}::bigint, 1,
                ${GiB}::bigint, 'STOPPING', ${waiting}::uuid, ${stopAt}::timestamptz)`;
      // Hours ending 0.5 h, 3.5 h and 15.5 h before now (weights 2^-0.25, 2^-1.75, and none:
      // past eight half-lives), and one not yet ended (weight 1).
      const rollups = [
        { hour: new Date('2026-11-29T11:00:00.000Z'), byteSeconds: 3 * GiB * 3600 },
        { hour: new Date('2026-11-29T08:00:00.000Z'), byteSeconds: 10 * GiB * 3600 },
        { hour: new Date('2026-11-28T20:00:00.000Z'), byteSeconds: 1000 * GiB * 3600 },
        { hour: new Date('2026-11-29T12:00:00.000Z'), byteSeconds: 0.5 * GiB * 3600 },
      ];
      for (const { hour, byteSeconds } of rollups) {
        await db.prisma.$executeRaw`
          INSERT INTO usage_rollup (shard_id, hour, team_id, reserved_byte_seconds)
          VALUES (${running}::uuid, ${hour}::timestamptz, ${limited}::uuid, ${byteSeconds}::bigint)`;
      }
      const decayed = 3 * 2 ** -0.25 + 10 * 2 ** -1.75 + 0.5;

      const expectTeams = (teams: readonly TeamRecord[]) => {
        const byId = new Map(teams.map((team) => [team.id, team]));
        const a = byId.get(limited);
        assert.ok(a !== undefined);
        assert.deepEqual(
          { ...a, decayedGiBHours: 0 },
          {
            id: limited,
            name: 'limited',
            guarantee: { bytes: 160 * GiB, gpus: 2, gpuModel: 'H100' },
            maxTotalBytes: 640 * GiB,
            maxShards: 12,
            decayedGiBHours: 0,
          },
        );
        assert.ok(
          Math.abs(a.decayedGiBHours - decayed) < 1e-9,
          `${a.decayedGiBHours} ≠ ${decayed}`,
        );
        assert.deepEqual(byId.get(open), {
          id: open,
          name: 'open',
          guarantee: { bytes: 0 },
          maxTotalBytes: 0,
          maxShards: 0,
          decayedGiBHours: 0,
        });
      };

      const state = await readPassState(db.prisma, HALF_LIFE_MS, now);
      expectTeams(state.teams);
      expectTeams(await readTeams(db.prisma, HALF_LIFE_MS, now));
      assert.deepEqual([...state.victimStops], [[waiting, [stopAt.getTime()]]]);
      assert.equal(state.elasticActive, false);

      await db.prisma.$executeRaw`UPDATE shard SET elastic = true WHERE id = ${running}::uuid`;
      // With the lock, in a pass's transaction: the same reads, and the lock held until it ends.
      const locked = await db.prisma.direct.transaction(async (tx) => {
        const read = await readPassState(tx, HALF_LIFE_MS, now, ADMISSION_LOCK);
        const [held] = await tx.$queryRaw<{ n: number }[]>`
          SELECT count(*)::int AS n FROM pg_locks
           WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
             AND objid = ${ADMISSION_LOCK}::bigint::oid`;
        return { read, held: held?.n };
      });
      assert.equal(locked.held, 1);
      expectTeams(locked.read.teams);
      assert.deepEqual([...locked.read.victimStops], [[waiting, [stopAt.getTime()]]]);
      assert.equal(locked.read.elasticActive, true);
    });
  });
}

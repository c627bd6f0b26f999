import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { countsAgainstQuota, SHARD_STATES, type ShardState } from '@gpushards/limits';
import fc from 'fast-check';
import { readTeamStates } from './team-quota.js';
import {
  createTestDatabase,
  startPostgres,
  TEST_DATABASE_KINDS,
  type PostgresServer,
  type TestDatabase,
} from '../testing/index.js';

/**
 * team_quota_usage (migration 20261127044338_team_quota_usage): the rows the shard trigger
 * appends add up to what the team's shards in the quota states request, whatever writes the
 * shards, and createShard's fold keeps the total.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const GiB = 2n ** 30n;

/** One write to the shard table, as any code path (or an operator's SQL) might make it. */
type Change =
  | {
      readonly kind: 'insert';
      readonly team: number;
      readonly state: ShardState;
      readonly gib: number;
      readonly gpus: number;
    }
  | { readonly kind: 'state'; readonly shard: number; readonly state: ShardState }
  | { readonly kind: 'resize'; readonly shard: number; readonly gib: number }
  | { readonly kind: 'move'; readonly shard: number; readonly team: number }
  | { readonly kind: 'delete'; readonly shard: number }
  | { readonly kind: 'fold'; readonly team: number };

const state = fc.constantFrom(...SHARD_STATES);
const change: fc.Arbitrary<Change> = fc.oneof(
  fc.record({
    kind: fc.constant('insert' as const),
    team: fc.nat(2),
    state,
    gib: fc.integer({ min: 1, max: 80 }),
    gpus: fc.integer({ min: 1, max: 8 }),
  }),
  fc.record({ kind: fc.constant('state' as const), shard: fc.nat(), state }),
  fc.record({
    kind: fc.constant('resize' as const),
    shard: fc.nat(),
    gib: fc.integer({ min: 1, max: 80 }),
  }),
  fc.record({ kind: fc.constant('move' as const), shard: fc.nat(), team: fc.nat(2) }),
  fc.record({ kind: fc.constant('delete' as const), shard: fc.nat() }),
  fc.record({ kind: fc.constant('fold' as const), team: fc.nat(2) }),
);

for (const kind of TEST_DATABASE_KINDS) {
  describe(`team quota usage on ${kind}`, () => {
    let db: TestDatabase;
    const teams: string[] = [];

    before(async () => {
      db = await createTestDatabase(kind, postgres ? { server: postgres } : {});
      for (let i = 0; i < 3; i++) {
        const id = randomUUID();
        await db.prisma
          .$executeRaw`INSERT INTO team (id, name) VALUES (${id}::uuid, ${`usage-${i}`})`;
        teams.push(id);
      }
    });
    after(async () => {
      await db?.cleanup();
    });

    it('the database counts the same states against a quota as libs/limits', async () => {
      for (const s of SHARD_STATES) {
        const [row] = await db.prisma.$queryRaw<{ counts: boolean }[]>`
          SELECT shard_counts_against_quota(${s}::shard_state) AS counts`;
        assert.equal(row?.counts, countsAgainstQuota(s), s);
      }
    });

    it('the rows add up to a recount after any writes to shards, folds between them', async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(change, { maxLength: 25 }), async (changes) => {
          await db.prisma.$executeRaw`DELETE FROM shard`;
          await db.prisma.$executeRaw`DELETE FROM team_quota_usage`;
          const shards: string[] = [];
          const pick = (n: number): string | undefined =>
            shards.length === 0 ? undefined : shards[n % shards.length];
          for (const c of changes) await apply(c, pick, shards);
          for (const teamId of teams) {
            const [recount] = await db.prisma.$queryRaw<{ shards: number; bytes: bigint }[]>`
              SELECT count(*)::int AS shards,
                     coalesce(sum(bytes_per_gpu * gpu_count), 0)::bigint AS bytes
                FROM shard WHERE team_id = ${teamId}::uuid
                 AND state::text = ANY(${SHARD_STATES.filter(countsAgainstQuota)})`;
            const read = (await readTeamStates(db.prisma, [teamId])).get(teamId);
            assert.equal(read?.shardCount, recount?.shards);
            assert.equal(read?.reservedBytes, recount?.bytes);
          }
        }),
        { numRuns: kind === 'postgres' ? 40 : 20 },
      );
    });

    it('a locking read folds each of its teams into one row, with the same totals', async () => {
      await db.prisma.$executeRaw`DELETE FROM shard`;
      await db.prisma.$executeRaw`DELETE FROM team_quota_usage`;
      const [first, second, other] = [teams[0]!, teams[2]!, teams[1]!];
      for (let i = 0; i < 5; i++) await insert(first, 'RUNNING', 2, 1);
      await db.prisma.$executeRaw`
        UPDATE shard SET state = 'EXITED' WHERE id = (SELECT min(id::text)::uuid FROM shard)`;
      for (let i = 0; i < 3; i++) await insert(second, 'RUNNING', 1, 1);
      for (let i = 0; i < 2; i++) await insert(other, 'RUNNING', 1, 1);
      const before = await readTeamStates(db.prisma, [first, second]);
      const folded = await db.prisma.$transaction((tx) =>
        readTeamStates(tx, [first, second], [], { lockAndFold: true }),
      );
      const rows = await db.prisma.$queryRaw<{ teamId: string; n: number }[]>`
        SELECT team_id::text AS "teamId", count(*)::int AS n FROM team_quota_usage
         GROUP BY team_id`;
      const rowsOf = (teamId: string) => rows.find((row) => row.teamId === teamId)?.n;
      assert.equal(rowsOf(first), 1);
      assert.equal(rowsOf(second), 1);
      assert.equal(rowsOf(other), 2, 'a team the read did not lock is left as it is');
      assert.equal(folded.get(first)?.shardCount, 4);
      assert.equal(folded.get(first)?.reservedBytes, 4n * 2n * GiB);
      assert.deepEqual(before, folded);
      assert.deepEqual(await readTeamStates(db.prisma, [first, second]), folded);
    });

    // PGlite has one connection: its transactions never overlap.
    if (kind === 'postgres')
      it('a locking read waits for the lock holder, then counts what it committed', async () => {
        await db.prisma.$executeRaw`DELETE FROM shard`;
        await db.prisma.$executeRaw`DELETE FROM team_quota_usage`;
        const teamId = teams[1]!;
        let release!: () => void;
        const released = new Promise<void>((resolve) => (release = resolve));
        let holding!: () => void;
        const held = new Promise<void>((resolve) => (holding = resolve));
        const holder = db.prisma.$transaction(async (tx) => {
          await readTeamStates(tx, [teamId], [], { lockAndFold: true });
          holding();
          await released;
          await tx.$executeRaw`
          INSERT INTO shard (id, team_id, name, image, bytes_per_gpu, gpu_count,
                             limit_bytes_per_gpu, state, updated_at)
          VALUES (${randomUUID()}::uuid, ${teamId}::uuid, 'usage-held', 'example/x:1',
                  ${3n * GiB}, 1, ${3n * GiB}, 'PLACED', now())`;
        });
        await held;
        const waiter = db.prisma.$transaction((tx) =>
          readTeamStates(tx, [teamId], [], { lockAndFold: true }),
        );
        // The waiter's read has begun once PostgreSQL shows its lock request waiting.
        for (;;) {
          const [row] = await db.prisma.$queryRaw<{ waiting: number }[]>`
          SELECT count(*)::int AS waiting FROM pg_locks
           WHERE locktype = 'advisory' AND NOT granted`;
          if (row!.waiting > 0) break;
        }
        release();
        await holder;
        const seen = (await waiter).get(teamId);
        assert.equal(seen?.shardCount, 1);
        assert.equal(seen?.reservedBytes, 3n * GiB);
      });

    let named = 0;
    async function insert(
      teamId: string,
      s: ShardState,
      gib: number,
      gpus: number,
    ): Promise<string> {
      const id = randomUUID();
      await db.prisma.$executeRaw`
        INSERT INTO shard (id, team_id, name, image, bytes_per_gpu, gpu_count, limit_bytes_per_gpu,
                           state, updated_at)
        VALUES (${id}::uuid, ${teamId}::uuid, ${`usage-${named++ % 5}`}, 'example/x:1',
                ${BigInt(gib) * GiB}, ${gpus}, ${BigInt(gib) * GiB}, ${s}::shard_state, now())`;
      return id;
    }

    async function apply(
      c: Change,
      pick: (n: number) => string | undefined,
      shards: string[],
    ): Promise<void> {
      switch (c.kind) {
        case 'insert':
          shards.push(await insert(teams[c.team]!, c.state, c.gib, c.gpus));
          return;
        case 'state': {
          const id = pick(c.shard);
          if (id !== undefined) {
            await db.prisma.$executeRaw`
              UPDATE shard SET state = ${c.state}::shard_state WHERE id = ${id}::uuid`;
          }
          return;
        }
        case 'resize': {
          const id = pick(c.shard);
          if (id !== undefined) {
            await db.prisma.$executeRaw`
              UPDATE shard SET bytes_per_gpu = ${BigInt(c.gib) * GiB},
                               limit_bytes_per_gpu = ${BigInt(c.gib) * GiB}
               WHERE id = ${id}::uuid`;
          }
          return;
        }
        case 'move': {
          const id = pick(c.shard);
          if (id !== undefined) {
            await db.prisma.$executeRaw`
              UPDATE shard SET team_id = ${teams[c.team]!}::uuid WHERE id = ${id}::uuid`;
          }
          return;
        }
        case 'delete': {
          const id = pick(c.shard);
          if (id !== undefined) {
            await db.prisma.$executeRaw`DELETE FROM shard WHERE id = ${id}::uuid`;
            shards.splice(shards.indexOf(id), 1);
          }
          return;
        }
        case 'fold':
          await db.prisma.$transaction((tx) =>
            readTeamStates(tx, [teams[c.team]!], [], { lockAndFold: true }),
          );
          return;
        default:
          throw new Error(`unhandled change: ${JSON.stringify(c satisfies never)}`);
      }
    }
  });
}

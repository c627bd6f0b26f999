import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { countsAgainstQuota, SHARD_STATES, type ShardState } from '@gpushards/limits';
import fc from 'fast-check';
import pg from 'pg';
import { TEAM_LOCK_SPACE } from '../database/index.js';
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
 * shards, and createShard's fold keeps the total: it moves the rows of the transactions that
 * had ended into the team's team_quota_total row and reads only the rows above its mark
 * (migration 20261128033955_team_quota_total).
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
          await db.prisma.$executeRaw`DELETE FROM team_quota_total`;
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

    it("a locking read folds its teams' rows into their totals, with the same sums", async () => {
      await db.prisma.$executeRaw`DELETE FROM shard`;
      await db.prisma.$executeRaw`DELETE FROM team_quota_usage`;
      await db.prisma.$executeRaw`DELETE FROM team_quota_total`;
      const [first, second, other] = [teams[0]!, teams[2]!, teams[1]!];
      for (let i = 0; i < 5; i++) await insert(first, 'RUNNING', 2, 1);
      await db.prisma.$executeRaw`
        UPDATE shard SET state = 'EXITED' WHERE id = (SELECT min(id::text)::uuid FROM shard)`;
      for (let i = 0; i < 3; i++) await insert(second, 'RUNNING', 1, 1);
      for (let i = 0; i < 2; i++) await insert(other, 'RUNNING', 1, 1);
      const before = await readTeamStates(db.prisma, [first, second]);
      const folded = await fold([first, second]);
      const rows = await db.prisma.$queryRaw<{ teamId: string; n: number }[]>`
        SELECT team_id::text AS "teamId", count(*)::int AS n FROM team_quota_usage
         GROUP BY team_id`;
      const rowsOf = (teamId: string) => rows.find((row) => row.teamId === teamId)?.n;
      // Nothing else runs here, so every transaction that wrote a row had ended: all folded.
      assert.equal(rowsOf(first), undefined);
      assert.equal(rowsOf(second), undefined);
      assert.equal(rowsOf(other), 2, 'a team the read did not lock is left as it is');
      const totals = await db.prisma.$queryRaw<{ teamId: string; shards: number; bytes: bigint }[]>`
        SELECT team_id::text AS "teamId", shards, bytes FROM team_quota_total ORDER BY 1`;
      assert.deepEqual(
        totals,
        [
          { teamId: first, shards: 4, bytes: 4n * 2n * GiB },
          { teamId: second, shards: 3, bytes: 3n * GiB },
        ].sort((a, b) => (a.teamId < b.teamId ? -1 : 1)),
      );
      assert.equal(folded.get(first)?.shardCount, 4);
      assert.equal(folded.get(first)?.reservedBytes, 4n * 2n * GiB);
      assert.deepEqual(before, folded);
      assert.deepEqual(await readTeamStates(db.prisma, [first, second]), folded);
      // A second fold with nothing new leaves the totals as they are.
      assert.deepEqual(await fold([first, second]), folded);
      await insert(first, 'PENDING', 3, 2);
      assert.equal((await fold([first])).get(first)?.reservedBytes, 4n * 2n * GiB + 6n * GiB);
    });

    // PGlite has one connection: its transactions never overlap.
    if (kind === 'postgres')
      it('a locking read waits for the lock holder, then counts what it committed', async () => {
        await db.prisma.$executeRaw`DELETE FROM shard`;
        await db.prisma.$executeRaw`DELETE FROM team_quota_usage`;
        await db.prisma.$executeRaw`DELETE FROM team_quota_total`;
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

    if (kind === 'postgres')
      it('a row of a transaction still running at a fold is counted when it commits, and folded later', async () => {
        await db.prisma.$executeRaw`DELETE FROM shard`;
        await db.prisma.$executeRaw`DELETE FROM team_quota_usage`;
        await db.prisma.$executeRaw`DELETE FROM team_quota_total`;
        const teamId = teams[0]!;
        const slow = new pg.Client({ connectionString: db.config.url });
        await slow.connect();
        try {
          // The slow transaction writes first (the lower transaction id) and commits last.
          await slow.query('BEGIN');
          await slow.query(insertSql, [randomUUID(), teamId, String(5n * GiB), 'RUNNING']);
          await insert(teamId, 'RUNNING', 2, 1);
          let read = (await fold([teamId])).get(teamId);
          assert.equal(read?.shardCount, 1, 'the slow shard is not committed yet');
          assert.equal(read?.reservedBytes, 2n * GiB);
          await slow.query('COMMIT');
          read = (await readTeamStates(db.prisma, [teamId])).get(teamId);
          assert.equal(read?.shardCount, 2, 'the slow shard counts once it commits');
          assert.equal(read?.reservedBytes, 7n * GiB);
          assert.deepEqual((await fold([teamId])).get(teamId), read);
          assert.equal(await usageRows(teamId), 0, 'the second fold took both rows');
          assert.deepEqual((await readTeamStates(db.prisma, [teamId])).get(teamId), read);

          // One that rolls back after a fold counts neither before nor after.
          await slow.query('BEGIN');
          await slow.query(insertSql, [randomUUID(), teamId, String(11n * GiB), 'PLACED']);
          assert.deepEqual((await fold([teamId])).get(teamId), read);
          await slow.query('ROLLBACK');
          assert.deepEqual((await fold([teamId])).get(teamId), read);
          assert.deepEqual((await readTeamStates(db.prisma, [teamId])).get(teamId), read);
        } finally {
          await slow.end();
        }
      });

    if (kind === 'postgres')
      it('under concurrent creates with folds, state changes, deletes and rollbacks, every snapshot adds up to a recount', async (t) => {
        await db.prisma.$executeRaw`DELETE FROM shard`;
        await db.prisma.$executeRaw`DELETE FROM team_quota_usage`;
        await db.prisma.$executeRaw`DELETE FROM team_quota_total`;
        const random = Math.random;
        const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
        const clients: pg.Client[] = [];
        const connect = async () => {
          const client = new pg.Client({ connectionString: db.config.url });
          await client.connect();
          clients.push(client);
          return client;
        };
        /** Runs `work` in a transaction, rolled back with probability `rollback`. */
        const transaction = async (
          client: pg.Client,
          rollback: number,
          work: () => Promise<void>,
        ): Promise<void> => {
          await client.query('BEGIN');
          try {
            await work();
            await client.query(random() < rollback ? 'ROLLBACK' : 'COMMIT');
          } catch (error) {
            await client.query('ROLLBACK');
            // Two writers of the same shard rows may deadlock; PostgreSQL then rolls one back.
            if ((error as { code?: string }).code !== '40P01') throw error;
          }
        };
        const states = ['PENDING', 'PLACED', 'STARTING', 'RUNNING', 'STOPPING', 'LOST'] as const;
        let writing = 0;
        let checked = 0;
        const writer = async (rounds: number, step: (client: pg.Client) => Promise<void>) => {
          const client = await connect();
          writing++;
          try {
            for (let i = 0; i < rounds; i++) await step(client);
          } finally {
            writing--;
          }
        };
        // As createShard: the teams' locks and fold, then its shards, in one transaction.
        const creator = (client: pg.Client) => {
          const locked = [...new Set([pick(teams), pick(teams)])];
          return transaction(client, 0.15, async () => {
            await client.query(`SELECT * FROM team_quota_states($1::text[], '{}', $2::int4)`, [
              locked,
              TEAM_LOCK_SPACE,
            ]);
            for (let n = 1 + Math.floor(random() * 3); n > 0; n--) {
              const gib = BigInt(1 + Math.floor(random() * 40));
              await client.query(insertSql, [
                randomUUID(),
                pick(locked),
                String(gib * GiB),
                pick(states),
              ]);
            }
          });
        };
        // As agents' state events, resizes and operators: no team lock.
        const changer = (client: pg.Client) =>
          transaction(client, 0.15, async () => {
            if (random() < 0.5) {
              await client.query(
                `UPDATE shard SET state = $1::shard_state WHERE id IN (
                   SELECT id FROM shard ORDER BY random() LIMIT 2 FOR UPDATE SKIP LOCKED)`,
                [pick([...states, 'EXITED', 'FAILED'])],
              );
            } else {
              const bytes = String(BigInt(1 + Math.floor(random() * 40)) * GiB);
              await client.query(
                `UPDATE shard SET bytes_per_gpu = $1::bigint, limit_bytes_per_gpu = $1::bigint
                  WHERE id IN (SELECT id FROM shard ORDER BY random() LIMIT 1
                                  FOR UPDATE SKIP LOCKED)`,
                [bytes],
              );
            }
            if (random() < 0.2) await client.query('SELECT pg_sleep(0.02)');
          });
        const deleter = (client: pg.Client) =>
          transaction(client, 0.15, async () => {
            await client.query(`DELETE FROM shard WHERE id IN (
              SELECT id FROM shard ORDER BY random() LIMIT 2 FOR UPDATE SKIP LOCKED)`);
          });
        // Writes first and commits late: holds the fold's mark back while others fold.
        const slow = (client: pg.Client) =>
          transaction(client, 0.2, async () => {
            await client.query(insertSql, [randomUUID(), pick(teams), String(3n * GiB), 'RUNNING']);
            await client.query('SELECT pg_sleep(0.15)');
          });
        const checker = async () => {
          const client = await connect();
          while (writing > 0 || checked === 0) {
            await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
            try {
              const { rows: read } = await client.query<{
                teamId: string;
                shardCount: number;
                reservedBytes: string;
              }>(
                `SELECT "teamId", "shardCount", "reservedBytes"::text
                    FROM team_quota_states($1::text[], '{}', NULL) ORDER BY 1`,
                [teams],
              );
              const { rows: recount } = await client.query<{
                teamId: string;
                shards: number;
                bytes: string;
              }>(recountSql, [teams]);
              assert.deepEqual(
                read.map((row) => [row.teamId, row.shardCount, row.reservedBytes]),
                recount.map((row) => [row.teamId, row.shards, row.bytes]),
              );
            } finally {
              await client.query('COMMIT');
            }
            checked++;
          }
        };
        try {
          await Promise.all([
            writer(60, creator),
            writer(60, creator),
            writer(60, creator),
            writer(60, changer),
            writer(60, changer),
            writer(40, deleter),
            writer(8, slow),
            checker(),
          ]);
        } finally {
          await Promise.all(clients.map((client) => client.end()));
        }
        t.diagnostic(`${checked} snapshots checked against a recount`);
        assert.ok(checked > 0);
        const recounter = new pg.Client({ connectionString: db.config.url });
        await recounter.connect();
        const { rows: recounted } = await recounter
          .query<{ teamId: string; shards: number; bytes: string }>(recountSql, [teams])
          .finally(() => recounter.end());
        const expected = recounted.map((row) => [row.teamId, row.shards, BigInt(row.bytes)]);
        const asRows = (read: Map<string, { shardCount: number; reservedBytes: bigint }>) =>
          [...teams]
            .sort()
            .map((id) => [id, read.get(id)?.shardCount, read.get(id)?.reservedBytes]);
        assert.deepEqual(asRows(await readTeamStates(db.prisma, teams)), expected);
        assert.deepEqual(asRows(await fold(teams)), expected);
        for (const teamId of teams) assert.equal(await usageRows(teamId), 0);
        assert.deepEqual(asRows(await readTeamStates(db.prisma, teams)), expected);
      });

    if (kind === 'postgres')
      it('a locking read touches as many pages after 200 folds of its teams as after one', async (t) => {
        await db.prisma.$executeRaw`DELETE FROM shard`;
        await db.prisma.$executeRaw`DELETE FROM team_quota_usage`;
        await db.prisma.$executeRaw`DELETE FROM team_quota_total`;
        // The rows each fold deletes stay until VACUUM: keep it away for the test.
        await db.prisma.$executeRaw`ALTER TABLE team_quota_usage SET (autovacuum_enabled = false)`;
        // As createShard's batches: 20 teams locked and read together, a shard for each.
        const batchTeams = (
          await db.prisma.$queryRaw<{ id: string }[]>`
            INSERT INTO team (id, name)
            SELECT gen_random_uuid(), 'pages-' || n FROM generate_series(1, 20) AS n
            RETURNING id::text`
        ).map((row) => row.id);
        const client = new pg.Client({ connectionString: db.config.url });
        await client.connect();
        // Counted by the backend until it reports them (at most once a second, between
        // transactions), so taken before and after the read, inside one transaction.
        const pagesSql = `
          SELECT sum(pg_stat_get_xact_blocks_fetched(oid))::int AS pages FROM pg_class
           WHERE oid = 'team_quota_usage'::regclass
              OR oid IN (SELECT indexrelid FROM pg_index
                          WHERE indrelid = 'team_quota_usage'::regclass)`;
        /** Pages of team_quota_usage (heap and indexes) one batch's locking read fetched. */
        const batch = async (): Promise<number> => {
          await client.query('BEGIN');
          const before = (await client.query<{ pages: number }>(pagesSql)).rows[0]!.pages;
          await client.query(`SELECT * FROM team_quota_states($1::text[], '{}', $2::int4)`, [
            batchTeams,
            TEAM_LOCK_SPACE,
          ]);
          const after = (await client.query<{ pages: number }>(pagesSql)).rows[0]!.pages;
          await client.query(
            `INSERT INTO shard (id, team_id, name, image, bytes_per_gpu, gpu_count,
                                limit_bytes_per_gpu, state, updated_at)
             SELECT gen_random_uuid(), team_id, 'pages', 'example/x:1', $2, 1, $2, 'PLACED', now()
               FROM unnest($1::uuid[]) AS team_id`,
            [batchTeams, String(GiB)],
          );
          await client.query('COMMIT');
          return after - before;
        };
        try {
          await batch();
          const second = await batch();
          let last = second;
          for (let i = 0; i < 200; i++) last = await batch();
          // Before the totals, each read visited the rows its teams' folds had deleted since the
          // last VACUUM: 1,687 pages after 200 folds against 181 after one, in one run.
          t.diagnostic(`${second} pages after one fold, ${last} after 200`);
          assert.ok(last <= second + 20, `${last} pages after 200 folds, ${second} after one`);
          const read = await readTeamStates(db.prisma, batchTeams);
          assert.deepEqual(
            new Set([...read.values()].map((team) => team.shardCount)),
            new Set([202]),
          );
        } finally {
          await client.end();
          await db.prisma.$executeRaw`ALTER TABLE team_quota_usage RESET (autovacuum_enabled)`;
        }
      });

    /** createShard's locking read of `teamIds`, in a transaction of its own. */
    function fold(teamIds: readonly string[]) {
      return db.prisma.$transaction((tx) => readTeamStates(tx, teamIds, [], { lockAndFold: true }));
    }

    async function usageRows(teamId: string): Promise<number> {
      const [row] = await db.prisma.$queryRaw<{ n: number }[]>`
        SELECT count(*)::int AS n FROM team_quota_usage WHERE team_id = ${teamId}::uuid`;
      return row!.n;
    }

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

/** A shard as createShard writes it, by a plain client: $1 id, $2 team, $3 bytes, $4 state. */
const insertSql = `
  INSERT INTO shard (id, team_id, name, image, bytes_per_gpu, gpu_count, limit_bytes_per_gpu,
                     state, updated_at)
  VALUES ($1::uuid, $2::uuid, 'usage-c', 'example/x:1', $3::bigint, 1, $3::bigint,
          $4::shard_state, now())`;

/** Each of the teams $1 with what its shards in the quota states request, by team id. */
const recountSql = `
  SELECT team.id::text AS "teamId", count(shard.id)::int AS shards,
         coalesce(sum(shard.bytes_per_gpu * shard.gpu_count), 0)::text AS bytes
    FROM team
    LEFT JOIN shard ON shard.team_id = team.id AND shard_counts_against_quota(shard.state)
   WHERE team.id = ANY($1::uuid[])
   GROUP BY team.id ORDER BY 1`;

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import {
  isUniqueViolation,
  postgresErrorCode,
  violatedCheckConstraint,
} from './database-errors.js';
import { preparedStatementName } from './database-backend.js';
import { Prisma } from './generated/client.js';
import {
  createTestDatabase,
  startPostgres,
  TEST_DATABASE_KINDS,
  type PostgresServer,
  type TestDatabase,
} from '../testing/index.js';

/**
 * DirectSql gives what `$queryRaw` gives (it replaces it on hot paths): the same rows for
 * every column type the statements read, the same parameters, the same errors, and
 * transactions that commit, roll back and serialize like Prisma's.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

/** One statement per column and parameter type that the control plane's raw SQL uses. */
const when = new Date('2026-11-27T07:31:02.345Z');
const SAME_ROWS: readonly { readonly name: string; readonly sql: () => Prisma.Sql }[] = [
  {
    name: 'integers, bigints and numerics, from parameters and columns',
    sql: () => Prisma.sql`SELECT ${7}::int4 AS i4, ${2n ** 40n}::int8 AS i8, 3::int2 AS i2,
      count(*) AS n, sum(x)::numeric AS total, ${1.5}::float8 AS f8, 2.25::real AS f4
      FROM generate_series(1, 3) AS x`,
  },
  {
    name: 'text, uuid, boolean and null',
    sql: () => Prisma.sql`SELECT ${'a ü'}::text AS t, ${'1f3f9a3e-0000-4000-8000-000000000001'}::uuid AS u,
      ${true}::boolean AS yes, false AS no, NULL::text AS nothing, ${null}::int8 AS none`,
  },
  {
    name: 'timestamps and dates',
    sql: () => Prisma.sql`SELECT ${when}::timestamptz AS at, ${when}::timestamp AS naive,
      ${when}::timestamptz::date AS day, extract(epoch FROM now() - now())::float8 AS zero`,
  },
  {
    name: 'json and jsonb, from objects and from SQL',
    sql: () => Prisma.sql`SELECT ${{ a: 1, b: ['x'] }}::jsonb AS from_object,
      json_build_object('n', 2::int8, 'at', ${when}::timestamptz) AS built,
      jsonb_agg(x) AS agg FROM generate_series(1, 2) AS x`,
  },
  {
    name: 'arrays of each kind, from array parameters',
    sql: () => Prisma.sql`SELECT ${['a', 'b']}::text[] AS texts, ${[1, 2]}::int4[] AS ints,
      ${[2n ** 33n, 5n]}::int8[] AS bigs, ${[true, false]}::bool[] AS bools,
      ${[when]}::timestamptz[] AS times, ARRAY[1.5, 2]::numeric[] AS decimals,
      ARRAY['{"k":1}'::jsonb] AS jsons, ${[]}::text[] AS empty,
      ARRAY['PLACED', 'RUNNING']::shard_state[] AS states, 'EXITED'::shard_state AS state`,
  },
  {
    name: 'nested fragments and joined lists',
    sql: () => Prisma.sql`SELECT v FROM (VALUES ${Prisma.join([1, 2, 3].map((n) => Prisma.sql`(${n}::int4)`))})
      AS t(v) WHERE v <> ${Prisma.sql`${2}::int4`} ORDER BY v`,
  },
];

for (const kind of TEST_DATABASE_KINDS) {
  describe(`DirectSql on ${kind}`, () => {
    let db: TestDatabase;
    before(async () => {
      db = await createTestDatabase(kind, postgres ? { server: postgres } : {});
    });
    after(async () => {
      await db?.cleanup();
    });

    for (const { name, sql } of SAME_ROWS) {
      it(`reads ${name} as $queryRaw does`, async () => {
        const expected = await db.prisma.$queryRaw<unknown[]>(sql());
        const actual = await db.prisma.direct.$queryRaw<unknown[]>(sql());
        assert.deepEqual(actual, expected);
        assert.ok(expected.length > 0);
      });
    }

    it('takes tagged templates and counts affected rows as $executeRaw does', async () => {
      const name = `direct-${randomUUID()}`;
      const inserted = await db.prisma.direct
        .$executeRaw`INSERT INTO team (id, name) VALUES (${randomUUID()}::uuid, ${name})`;
      assert.equal(inserted, 1);
      const rows = await db.prisma.direct.$queryRaw<{ name: string }[]>`
        SELECT name FROM team WHERE name = ${name}`;
      assert.deepEqual(rows, [{ name }]);
    });

    it('fails as $queryRaw fails: the SQLSTATE and constraint are read the same way', async () => {
      const name = `unique-${randomUUID()}`;
      const insert = () =>
        Prisma.sql`INSERT INTO team (id, name) VALUES (gen_random_uuid(), ${name})`;
      await db.prisma.$executeRaw(insert());
      const viaPrisma = await db.prisma.$executeRaw(insert()).catch((error: unknown) => error);
      const direct = await db.prisma.direct.$executeRaw(insert()).catch((error: unknown) => error);
      assert.equal(postgresErrorCode(direct), '23505');
      assert.equal(postgresErrorCode(direct), postgresErrorCode(viaPrisma));
      assert.equal(isUniqueViolation(direct), true);
      const check = () => Prisma.sql`SELECT 1 / ${0}::int4`;
      const zero = await db.prisma.direct.$queryRaw(check()).catch((error: unknown) => error);
      assert.equal(postgresErrorCode(zero), '22012');
      assert.equal(violatedCheckConstraint(zero), undefined);
    });

    it('commits a transaction, and rolls back every statement of one that throws', async () => {
      const kept = `kept-${randomUUID()}`;
      const dropped = `dropped-${randomUUID()}`;
      await db.prisma.direct.transaction(async (tx) => {
        await tx.$executeRaw`INSERT INTO team (id, name) VALUES (gen_random_uuid(), ${kept})`;
      });
      const failure = await db.prisma.direct
        .transaction(async (tx) => {
          await tx.$executeRaw`INSERT INTO team (id, name) VALUES (gen_random_uuid(), ${dropped})`;
          await tx.$executeRaw`INSERT INTO team (id, name) VALUES (gen_random_uuid(), ${kept})`;
        })
        .catch((error: unknown) => error);
      assert.equal(isUniqueViolation(failure), true);
      const names = await db.prisma.$queryRaw<{ name: string }[]>`
        SELECT name FROM team WHERE name IN (${kept}, ${dropped})`;
      assert.deepEqual(names, [{ name: kept }]);
      // The connection went back to the pool in a usable state.
      assert.deepEqual(await db.prisma.direct.$queryRaw`SELECT 1::int4 AS one`, [{ one: 1 }]);
    });

    it('rolls back a transaction that runs past its timeout', async () => {
      const name = `late-${randomUUID()}`;
      const failure = await db.prisma.direct
        .transaction(
          async (tx) => {
            await tx.$executeRaw`INSERT INTO team (id, name) VALUES (gen_random_uuid(), ${name})`;
            // Keeps the transaction busy until it says it has run past its timeout.
            for (;;) {
              const expired = await tx.$queryRaw`SELECT 1`.then(
                () => false,
                (error: { code?: string }) => error.code === 'P2028',
              );
              if (expired) return;
              // PGlite answers without leaving the microtask queue: let the timer phase run.
              await new Promise((resolve) => setImmediate(resolve));
            }
          },
          { timeout: 1 },
        )
        .catch((error: unknown) => error);
      assert.equal((failure as { code?: string } | undefined)?.code, 'P2028');
      const rows = await db.prisma.$queryRaw<unknown[]>`SELECT 1 FROM team WHERE name = ${name}`;
      assert.equal(rows.length, 0);
    });
  });
}

describe('DirectSql on PostgreSQL', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase('postgres', { server: postgres! });
  });
  after(async () => {
    await db?.cleanup();
  });

  describe('DirectSql transactions on PostgreSQL serialize with Prisma transactions', () => {
    it('waits for a row lock that a Prisma transaction holds, then sees its commit', async () => {
      const id = randomUUID();
      await db.prisma
        .$executeRaw`INSERT INTO team (id, name) VALUES (${id}::uuid, ${`lock-${id}`})`;
      let locked!: () => void;
      const lockTaken = new Promise<void>((resolve) => (locked = resolve));
      let finish!: () => void;
      const finishing = new Promise<void>((resolve) => (finish = resolve));
      const holder = db.prisma.$transaction(async (tx) => {
        await tx.$queryRaw`SELECT id FROM team WHERE id = ${id}::uuid FOR UPDATE`;
        locked();
        await finishing;
        await tx.$executeRaw`UPDATE team SET name = ${`held-${id}`} WHERE id = ${id}::uuid`;
      });
      await lockTaken;
      // Without the wait it would read the name as it was before the holder's update.
      const waiter = db.prisma.direct.transaction(async (tx) => {
        const [row] = await tx.$queryRaw<{ name: string }[]>`
        SELECT name FROM team WHERE id = ${id}::uuid FOR UPDATE`;
        return row!.name;
      });
      finish();
      await holder;
      assert.equal(await waiter, `held-${id}`);
    });
  });

  describe('prepared statements on PostgreSQL', () => {
    it('names only the statements that ask for it', () => {
      assert.equal(
        preparedStatementName('\n  /* prepared:write_batch */\n  WITH x AS (SELECT 1)'),
        'write_batch',
      );
      assert.equal(preparedStatementName('SELECT 1 /* prepared:write_batch */'), '');
      assert.equal(preparedStatementName('SELECT 1'), '');
    });

    it('prepares a marked statement on its connection once, and no other', async () => {
      const prepared = await db.prisma.direct.transaction(async (tx) => {
        for (let i = 0; i < 2; i++) {
          await tx.$queryRaw`/* prepared:direct_sql_probe */ SELECT ${i}::int AS i`;
          await tx.$queryRaw`SELECT ${i}::int AS unnamed`;
        }
        return tx.$queryRaw<{ name: string }[]>`SELECT name FROM pg_prepared_statements`;
      });
      assert.deepEqual(
        prepared.map((row) => row.name),
        ['direct_sql_probe'],
      );
    });
  });
});

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Test } from '@nestjs/testing';
import pg from 'pg';
import { createLogger } from '../logging/logger.js';
import { LoggingModule } from '../logging/logging.module.js';
import { startPostgres, type PostgresServer } from '../testing/postgres-server.js';
import {
  createTestDatabase,
  TEST_DATABASE_KINDS,
  type TestDatabase,
} from '../testing/throwaway-database.js';
import { databaseConfigFromEnv, DatabaseConfigError } from './database-config.js';
import { isUniqueViolation, violatedCheckConstraint } from './database-errors.js';
import { DatabaseModule } from './database.module.js';
import { openEmbeddedDatabase } from './embedded-database.js';
import type { Prisma } from './generated/client.js';
import { PrismaService } from './prisma.service.js';
import { lockTeamForUpdate } from './team-lock.js';

const GiB = 1024n ** 3n;

let server: PostgresServer;
before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server.stop();
});

function sleep(milliseconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, milliseconds));
}

/** A promise and the function that resolves it. */
function signal(): { promise: Promise<void>; fire: () => void } {
  let fire = () => {};
  const promise = new Promise<void>((resolve) => (fire = resolve));
  return { promise, fire };
}

/**
 * Until another session waits on a lock the transaction `tx` holds, as PostgreSQL's
 * pg_blocking_pids tells (asked again at each answer; there is no notice of it to wait on).
 * Fails naming `what` after 4 s, inside the interactive transaction's 5 s.
 */
async function untilBlockingAnother(tx: Prisma.TransactionClient, what: string): Promise<void> {
  const deadline = Date.now() + 4_000;
  for (;;) {
    const [row] = await tx.$queryRaw<{ waiting: bigint }[]>`
      SELECT count(*) AS waiting FROM pg_stat_activity
      WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))`;
    if (row!.waiting > 0n) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
  }
}

async function addGpu(db: TestDatabase, totalBytes: bigint, overcommitRatio = 1.0) {
  const host = await db.prisma.host.create({ data: { id: `host-${Math.random()}`, name: 'h' } });
  return db.prisma.gpu.create({
    data: {
      uuid: `GPU-${Math.random()}`,
      hostId: host.id,
      index: 0,
      model: 'L4',
      totalBytes,
      overcommitRatio,
    },
  });
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`constraints on ${kind}`, () => {
    let db: TestDatabase;
    before(async () => {
      db = await createTestDatabase(kind, { server });
    });
    after(() => db.cleanup());

    it('reserved bytes stay within floor(total × overcommit ratio) and never go negative', async () => {
      const gpu = await addGpu(db, 24n * GiB);
      const setReserved = (bytes: bigint) =>
        db.prisma.$executeRaw`UPDATE gpu SET reserved_bytes = ${bytes} WHERE uuid = ${gpu.uuid}`;
      assert.equal(await setReserved(24n * GiB), 1);
      for (const bytes of [24n * GiB + 1n, -1n]) {
        await assert.rejects(setReserved(bytes), (error) => {
          assert.equal(violatedCheckConstraint(error), 'gpu_reserved_within_capacity');
          return true;
        });
      }
      await assert.rejects(
        db.prisma.gpu.update({ where: { uuid: gpu.uuid }, data: { reservedBytes: 25n * GiB } }),
        (error) => violatedCheckConstraint(error) === 'gpu_reserved_within_capacity',
      );
      assert.equal(
        (await db.prisma.gpu.findUniqueOrThrow({ where: { uuid: gpu.uuid } })).reservedBytes,
        24n * GiB,
      );
    });

    it('the overcommit ratio raises the capacity, rounded down; NaN and 0 are refused', async () => {
      const gpu = await addGpu(db, 101n, 1.5); // capacity floor(151.5) = 151
      const setReserved = (bytes: bigint) =>
        db.prisma.$executeRaw`UPDATE gpu SET reserved_bytes = ${bytes} WHERE uuid = ${gpu.uuid}`;
      assert.equal(await setReserved(151n), 1);
      await assert.rejects(
        setReserved(152n),
        (error) => violatedCheckConstraint(error) === 'gpu_reserved_within_capacity',
      );
      for (const ratio of [Number.NaN, 0, Number.POSITIVE_INFINITY]) {
        await assert.rejects(
          db.prisma.gpu.update({ where: { uuid: gpu.uuid }, data: { overcommitRatio: ratio } }),
          (error) => violatedCheckConstraint(error) === 'gpu_overcommit_ratio_finite_positive',
        );
      }
    });

    it('a conditional increment reserves only what fits (the placement pattern)', async () => {
      const gpu = await addGpu(db, 10n * GiB);
      const reserve = (bytes: bigint) => db.prisma.$executeRaw`
        UPDATE gpu SET reserved_bytes = reserved_bytes + ${bytes}
        WHERE uuid = ${gpu.uuid} AND reserved_bytes + ${bytes} <= floor(total_bytes * overcommit_ratio)`;
      assert.equal(await reserve(6n * GiB), 1);
      assert.equal(await reserve(6n * GiB), 0, 'does not fit: no row updated, no error');
      assert.equal(await reserve(4n * GiB), 1);
    });

    it('shards: limit at least the request, sizes positive, idempotency key unique per team', async () => {
      const team = await db.prisma.team.create({ data: { name: `team-${Math.random()}` } });
      const shard = (overrides: object) =>
        db.prisma.shard.create({
          data: {
            teamId: team.id,
            name: 's',
            image: 'busybox',
            bytesPerGpu: GiB,
            gpuCount: 1,
            limitBytesPerGpu: GiB + 300n * 1024n ** 2n,
            ...overrides,
          },
        });
      await shard({});
      await shard({}); // many shards without a key
      await assert.rejects(
        shard({ limitBytesPerGpu: GiB - 1n }),
        (e) => violatedCheckConstraint(e) === 'shard_request_valid',
      );
      await assert.rejects(
        shard({ gpuCount: 0 }),
        (e) => violatedCheckConstraint(e) === 'shard_request_valid',
      );
      await shard({ idempotencyKey: 'k1' });
      await assert.rejects(shard({ idempotencyKey: 'k1' }), (error) => isUniqueViolation(error));
      const other = await db.prisma.team.create({ data: { name: `team-${Math.random()}` } });
      await shard({ teamId: other.id, idempotencyKey: 'k1' });
    });

    it('usage samples refuse negative bytes and make a repeated heartbeat a no-op', async () => {
      const team = await db.prisma.team.create({ data: { name: `team-${Math.random()}` } });
      const created = await db.prisma.shard.create({
        data: {
          teamId: team.id,
          name: 's',
          image: 'i',
          bytesPerGpu: 1n,
          gpuCount: 1,
          limitBytesPerGpu: 1n,
        },
      });
      const at = new Date('2030-01-01T00:00:00.123Z');
      const sample = { shardId: created.id, gpuUuid: 'GPU-1', at, usedBytes: 5n };
      assert.equal(
        (await db.prisma.usageSample.createMany({ data: [sample], skipDuplicates: true })).count,
        1,
      );
      assert.equal(
        (await db.prisma.usageSample.createMany({ data: [sample], skipDuplicates: true })).count,
        0,
      );
      await assert.rejects(
        db.prisma.usageSample.create({ data: { ...sample, at: new Date(), usedBytes: -1n } }),
        (error) => violatedCheckConstraint(error) === 'usage_sample_used_non_negative',
      );
    });
  });

  describe(`transactions on ${kind}`, () => {
    let db: TestDatabase;
    before(async () => {
      db = await createTestDatabase(kind, { server });
    });
    after(() => db.cleanup());

    it('an interactive transaction commits, or rolls back on error', async () => {
      const name = `committed-${Math.random()}`;
      await db.prisma.$transaction(async (tx) => {
        const team = await tx.team.create({ data: { name } });
        await lockTeamForUpdate(tx, team.id);
        await tx.quotaPolicy.create({
          data: { teamId: team.id, maxTotalBytes: 0n, maxShards: 0, maxBytesPerShard: 0n },
        });
      });
      assert.equal(await db.prisma.team.count({ where: { name } }), 1);
      await assert.rejects(
        db.prisma.$transaction(async (tx) => {
          await tx.team.create({ data: { name: 'rolled-back' } });
          throw new Error('changed my mind');
        }),
        /changed my mind/,
      );
      assert.equal(await db.prisma.team.count({ where: { name: 'rolled-back' } }), 0);
    });

    it('quota check then insert under the team lock: two racing creators, one wins', async () => {
      const team = await db.prisma.team.create({ data: { name: `race-${Math.random()}` } });
      const createIfUnderQuota = () =>
        db.prisma.$transaction(async (tx) => {
          await lockTeamForUpdate(tx, team.id);
          const held = await tx.shard.count({ where: { teamId: team.id } });
          await sleep(100); // widen the window between the read and the write
          if (held >= 1) return false;
          await tx.shard.create({
            data: {
              teamId: team.id,
              name: 's',
              image: 'i',
              bytesPerGpu: 1n,
              gpuCount: 1,
              limitBytesPerGpu: 1n,
            },
          });
          return true;
        });
      const results = await Promise.all([createIfUnderQuota(), createIfUnderQuota()]);
      assert.deepEqual(results.sort(), [false, true]);
      assert.equal(await db.prisma.shard.count({ where: { teamId: team.id } }), 1);
    });
  });
}

describe('the per-team lock on PostgreSQL', () => {
  let db: TestDatabase;
  before(async () => {
    db = await createTestDatabase('postgres', { server });
  });
  after(() => db.cleanup());

  it('makes a second transaction on the same team wait for the first to end', async () => {
    const team = await db.prisma.team.create({ data: { name: 'serialized' } });
    const other = await db.prisma.team.create({ data: { name: 'independent' } });
    const events: string[] = [];
    const firstHoldsLock = signal();
    const otherTeamLocked = signal();
    const first = db.prisma.$transaction(async (tx) => {
      await lockTeamForUpdate(tx, team.id);
      events.push('first locked');
      firstHoldsLock.fire();
      // Ends once the other team's transaction got its lock and PostgreSQL says the second
      // waits on this one, not after a pause.
      await otherTeamLocked.promise;
      await untilBlockingAnother(tx, 'the second transaction to wait on the team lock');
      events.push('first ending');
    });
    await firstHoldsLock.promise;
    const second = db.prisma.$transaction(async (tx) => {
      await lockTeamForUpdate(tx, team.id);
      events.push('second locked');
    });
    const otherTeam = db.prisma.$transaction(async (tx) => {
      await lockTeamForUpdate(tx, other.id);
      events.push('other team locked');
      otherTeamLocked.fire();
    });
    await Promise.all([first, second, otherTeam]);
    assert.deepEqual(events, [
      'first locked',
      'other team locked',
      'first ending',
      'second locked',
    ]);
  });
});

describe('PGlite', () => {
  it('serializes interactive transactions on its one connection', async () => {
    const db = await createTestDatabase('pglite');
    try {
      const events: string[] = [];
      const run = (name: string) =>
        db.prisma.$transaction(async (tx) => {
          events.push(`${name} begins`);
          await tx.team.create({ data: { name } });
          await sleep(100);
          events.push(`${name} ends`);
        });
      await Promise.all([run('a'), run('b')]);
      assert.deepEqual(events, ['a begins', 'a ends', 'b begins', 'b ends']);
    } finally {
      await db.cleanup();
    }
  });

  it('refuses a second open of a data folder while the first is open', async () => {
    const db = await createTestDatabase('pglite');
    try {
      await assert.rejects(PrismaService.open(db.config), /is open in process \d+/);
      assert.equal(await db.prisma.team.count(), 0, 'the first is unharmed');
    } finally {
      await db.cleanup();
    }
  });

  it('knows the array types of enums its own migrations created, on a first start', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'gpushards-first-start-'));
    const prisma = await PrismaService.open({ embeddedDataDir: dataDir });
    try {
      const states = ['STOPPED', 'LOST'];
      const rows = await prisma.$queryRaw<{ count: bigint }[]>`
        SELECT count(*) AS count FROM shard WHERE state = ANY(${states}::shard_state[])`;
      assert.equal(Number(rows[0]?.count), 0);
    } finally {
      await prisma.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('keeps its data folder across a restart', async () => {
    const db = await createTestDatabase('pglite', { durable: true });
    try {
      await db.prisma.team.create({ data: { name: 'survivor' } });
      await db.prisma.close();
      const reopened = await PrismaService.open(db.config);
      try {
        assert.deepEqual(
          (await reopened.team.findMany()).map((team) => team.name),
          ['survivor'],
        );
      } finally {
        await reopened.close();
      }
    } finally {
      await db.cleanup();
    }
  });

  it('keeps a committed transaction when its process is killed (durable mode)', async () => {
    const db = await createTestDatabase('pglite', { durable: true });
    await db.prisma.close();
    const dataDir = db.config.embeddedDataDir;
    const embeddedModule = fileURLToPath(new URL('./embedded-database.js', import.meta.url));
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { openEmbeddedDatabase } = await import(${JSON.stringify(embeddedModule)});
         const db = await openEmbeddedDatabase(${JSON.stringify(dataDir)}, { durable: true });
         await db.pglite.query("INSERT INTO team (id, name) VALUES (gen_random_uuid(), 'committed')");
         console.log('committed');
         setInterval(() => {}, 1000);`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on(
          'data',
          (chunk: Buffer) => chunk.toString().includes('committed') && resolve(),
        );
        child.once('exit', (code) => reject(new Error(`child exited early (${code})`)));
      });
      await assert.rejects(
        openEmbeddedDatabase(dataDir, { durable: true }),
        new RegExp(`is open in process ${child.pid}`),
      );
    } finally {
      child.kill('SIGKILL');
    }
    await new Promise((resolve) => child.once('exit', resolve));
    const reopened = await openEmbeddedDatabase(dataDir, { durable: true });
    try {
      assert.deepEqual((await reopened.pglite.query('SELECT name FROM team')).rows, [
        { name: 'committed' },
      ]);
    } finally {
      await reopened.close();
      await db.cleanup();
    }
  });
});

describe('DatabaseModule', () => {
  it('migrates the database during init (saying so in the application log) and closes it on shutdown', async () => {
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    await admin.query('CREATE DATABASE nest_module_test');
    try {
      const config = { url: server.urlFor('nest_module_test'), embeddedDataDir: '' };
      const log = new PassThrough();
      let logged = '';
      log.on('data', (chunk: Buffer) => (logged += chunk.toString()));
      const moduleRef = await Test.createTestingModule({
        imports: [
          LoggingModule.forRoot(createLogger('info', log), new PassThrough()),
          DatabaseModule.forRoot(config),
        ],
      }).compile();
      await moduleRef.init();
      const prisma = moduleRef.get(PrismaService);
      assert.equal(prisma.backendKind, 'postgres');
      assert.equal(await prisma.team.count(), 0, 'the tables exist');
      const line = logged
        .split('\n')
        .filter((text) => text !== '')
        .map((text) => JSON.parse(text) as Record<string, unknown>)
        .find((record) => record['msg'] === 'applied migrations');
      assert.ok(line, `no "applied migrations" line in the log:\n${logged}`);
      assert.equal(line['module'], 'database');
      assert.equal(line['service'], 'control-plane');
      assert.ok(Array.isArray(line['migrations']) && line['migrations'].length > 0);
      await moduleRef.close();
      const sessions = await admin.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = 'nest_module_test'",
      );
      assert.equal(sessions.rows[0].n, 0, 'every connection was closed');
    } finally {
      await admin.query('DROP DATABASE IF EXISTS nest_module_test WITH (FORCE)');
      await admin.end();
    }
  });
});

describe('databaseConfigFromEnv', () => {
  it('defaults to the embedded database in .gpushards/database under the working folder', () => {
    assert.deepEqual(databaseConfigFromEnv({}, '/srv/app'), {
      url: undefined,
      embeddedDataDir: '/srv/app/.gpushards/database',
      poolSize: undefined,
    });
    assert.deepEqual(
      databaseConfigFromEnv(
        {
          DATABASE_URL: 'postgresql://u:p@db/x',
          GPUSHARDS_DATA_DIR: 'data',
          GPUSHARDS_DATABASE_POOL_SIZE: '4',
        },
        '/srv/app',
      ),
      { url: 'postgresql://u:p@db/x', embeddedDataDir: '/srv/app/data/database', poolSize: 4 },
    );
  });

  it('refuses bad values as every setting is refused, without echoing a URL (it may hold a password)', () => {
    assert.throws(
      () =>
        databaseConfigFromEnv({
          DATABASE_URL: 'mysql://user:secret@db/x',
          GPUSHARDS_DATABASE_POOL_SIZE: '0',
        }),
      (error: unknown) => {
        assert.ok(error instanceof DatabaseConfigError);
        assert.deepEqual(error.problems, [
          'DATABASE_URL must be a postgresql:// URL, got (hidden)',
          'GPUSHARDS_DATABASE_POOL_SIZE must be a whole number from 1 to 1000, got "0"',
        ]);
        assert.doesNotMatch(error.message, /secret/);
        return true;
      },
    );
    for (const size of ['1001', '2.5', 'ten', '-1']) {
      assert.throws(
        () => databaseConfigFromEnv({ GPUSHARDS_DATABASE_POOL_SIZE: size }),
        new RegExp(
          `: GPUSHARDS_DATABASE_POOL_SIZE must be a whole number from 1 to 1000, got "${size}"$`,
        ),
      );
    }
  });
});

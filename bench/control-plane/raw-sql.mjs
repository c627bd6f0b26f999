// The control plane's CPU per SQL statement, by path: node-postgres alone, Prisma's driver
// adapter (what prisma.direct, DirectSql, calls), and PrismaClient's $queryRawUnsafe and
// interactive $transaction; each a statement alone and a transaction of three. Sequential calls
// on a throwaway PostgreSQL (the test helper's server), so the figure is this process's own
// CPU per call (process.cpuUsage), not throughput. Every path runs `--rounds` times in turn
// after a warm-up; the table gives each path's median over the rounds.
//
// Build first (npx nx run-many -t build), then:
//   node bench/control-plane/raw-sql.mjs [--calls 3000] [--rounds 3]
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { benchOptions } from '../options.mjs';

const options = benchOptions(import.meta.url, {
  options: {
    calls: { type: 'string', default: '3000', value: 'count', help: 'calls per path and round' },
    rounds: { type: 'string', default: '3', value: 'count', help: 'rounds of every path' },
  },
  example: 'flock /tmp/bench.lock node bench/control-plane/raw-sql.mjs --calls 1000 --rounds 1',
});
const CALLS = Number(options.calls);
const ROUNDS = Number(options.rounds);
for (const [name, value] of [
  ['--calls', CALLS],
  ['--rounds', ROUNDS],
]) {
  if (!Number.isInteger(value) || value < 1) {
    console.error(`${name} must be a whole number of at least 1`);
    process.exit(2);
  }
}

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const dist = join(ROOT, 'apps/control-plane/dist');
const { startPostgres, createTestDatabase } = await import(
  pathToFileURL(`${dist}/testing/index.js`).href
);
const { Prisma } = await import(pathToFileURL(`${dist}/database/index.js`).href);

const server = await startPostgres();
const database = await createTestDatabase('postgres', { server });
const prisma = database.prisma;
const adapter = await (await prisma.backend()).clientAdapter.connect();
const pool = adapter.underlyingDriver();

const SQL = 'SELECT $1::int AS x, now() AS t, $2::text AS s';
const statement = (i) => Prisma.sql`SELECT ${i}::int AS x, now() AS t, ${'abc'}::text AS s`;
const THREE = [0, 1, 2];
const paths = {
  'node-postgres': (i) => pool.query(SQL, [i, 'abc']),
  'driver adapter (DirectSql)': (i) => prisma.direct.$queryRaw(statement(i)),
  'PrismaClient $queryRaw': (i) => prisma.$queryRaw(statement(i)),
  'node-postgres, transaction of 3': async (i) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      for (const _ of THREE) await client.query(SQL, [i, 'abc']);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  },
  'DirectSql, transaction of 3': (i) =>
    prisma.direct.transaction(async (tx) => {
      for (const _ of THREE) await tx.$queryRaw(statement(i));
    }),
  'PrismaClient, transaction of 3': (i) =>
    prisma.$transaction(async (tx) => {
      for (const _ of THREE) await tx.$queryRaw(statement(i));
    }),
};

const cpuMs = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
};
const results = new Map(Object.keys(paths).map((name) => [name, []]));
try {
  for (const run of Object.values(paths)) for (let i = 0; i < 300; i++) await run(i);
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, run] of Object.entries(paths)) {
      const before = cpuMs();
      for (let i = 0; i < CALLS; i++) await run(i);
      results.get(name).push(((cpuMs() - before) * 1000) / CALLS);
    }
  }
} finally {
  await adapter.dispose();
  await database.cleanup();
  await server.stop();
}
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
console.table(
  [...results].map(([path, perCall]) => ({
    path,
    'µs CPU per call (median)': median(perCall).toFixed(0),
    rounds: perCall.map((v) => v.toFixed(0)).join(' '),
  })),
);

// createShard through the GraphQL endpoint on PostgreSQL, 1,000 registered hosts × 8 GPUs:
// closed-loop throughput and latency, then open-loop latency at a fixed rate.
// Placement and commit only: agent commands go to a sink (serve.mjs), nothing is launched.
// The load generator runs in its own process (load.mjs); every case reports the CPU time per
// request of the control plane(s), PostgreSQL and the load generator.
//
// Build first (npx nx run control-plane:build), then:
//   node bench/control-plane/create-shard.mjs [--seconds 10] [--concurrency 64] [--rates 50,100,200]
//     [--teams 100] [--processes 1] [--pool 10] [--dist apps/control-plane/dist]
//     [--cases me,closed,open] [--no-keep-alive] [--server-node-args "--flag ..."]
//     [--profile DIR]   (the server writes a V8 CPU profile into DIR when the run ends)
//     [--statements]    (per case, the statements that took PostgreSQL's time: plan + execute)
//     [--no-fsync]      (PostgreSQL as the tests run it: WAL not flushed at commit)
//     [--limits off]    (the server without its request limits: cost, depth, rate; docs/api.md)
//     [--variants "name=on,limits=on;name=off,limits=off"]  (servers side by side on one
//                       database; each case runs against each in turn; keys: name, limits, dist,
//                       node-env: the server's NODE_ENV, unset by default; the Docker image
//                       sets production, under which graphql-js skips its cross-realm checks)
//     [--rounds 1]      (each round runs every case against every variant, the order
//                       reversed every other round: A B, B A, A B ...; medians at the end)
//     [--separate]      (each variant on a database of its own, migrated and set up by its own
//                       build, on the one PostgreSQL: builds whose schemas differ side by side)
import { fork, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { cpuOf, postgresCpu, postmasterOf } from '../proc-cpu.mjs';
import { benchOptions } from '../options.mjs';

const options = benchOptions(import.meta.url, {
  options: {
    seconds: { type: 'string', default: '10', value: 'number', help: 'seconds of each case' },
    concurrency: {
      type: 'string',
      default: '64',
      value: 'count',
      help: 'requests in flight (closed loop)',
    },
    rates: {
      type: 'string',
      default: '50,100,200',
      value: 'counts',
      help: 'open-loop rates, requests per second',
    },
    teams: { type: 'string', default: '100', value: 'count', help: 'teams the creates go round' },
    processes: {
      type: 'string',
      default: '1',
      value: 'count',
      help: 'control-plane processes per variant',
    },
    pool: {
      type: 'string',
      default: '10',
      value: 'count',
      help: "each control plane's database pool",
    },
    dist: {
      type: 'string',
      default: 'apps/control-plane/dist',
      help: 'the control-plane build (dist folder)',
    },
    profile: {
      type: 'string',
      meta: 'DIR',
      help: 'the server writes a V8 CPU profile here when the run ends',
    },
    cases: {
      type: 'string',
      default: 'me,closed,open',
      choices: ['me', 'closed', 'open'],
      list: true,
      help: 'the cases to run',
    },
    'server-node-args': {
      type: 'string',
      default: '',
      meta: '"--flag …"',
      help: "the server's node flags",
    },
    'no-keep-alive': { type: 'boolean', default: false, help: 'a connection per request' },
    statements: {
      type: 'boolean',
      default: false,
      help: "per case, the statements that took PostgreSQL's time",
    },
    'no-fsync': {
      type: 'boolean',
      default: false,
      help: 'PostgreSQL without fsync (as the tests run it)',
    },
    limits: {
      type: 'string',
      default: 'on',
      choices: ['on', 'off'],
      help: "the server's request limits",
    },
    variants: {
      type: 'string',
      meta: '"name=A,limits=on;…"',
      help: 'servers side by side (keys: name, limits, dist, node-env; default: this build)',
    },
    rounds: {
      type: 'string',
      default: '1',
      value: 'count',
      help: 'rounds; the variant order reversed every other',
    },
    separate: { type: 'boolean', default: false, help: 'each variant on a database of its own' },
  },
  example:
    'flock /tmp/bench.lock node bench/control-plane/create-shard.mjs --seconds 5 --variants "name=after;name=before,dist=/work/before/apps/control-plane/dist"',
});
const SECONDS = Number(options.seconds);
const CONCURRENCY = Number(options.concurrency);
const RATES = options.rates.split(',').map(Number);
const TEAMS = Number(options.teams);
const PROCESSES = Number(options.processes);
const HOSTS = 1000;
const GPUS_PER_HOST = 8;
const dist = resolve(options.dist);
const PROFILE = options.profile === undefined ? undefined : resolve(options.profile);
const KEEP_ALIVE = !options['no-keep-alive'];
const CASES = new Set(options.cases.split(','));
const STATEMENTS = options.statements;
const ROUNDS = Number(options.rounds);
const SEPARATE = options.separate;
/**
 * The servers to compare, side by side on one database: a build (`dist`) with its request
 * limits on or off. Builds compared this way must share the database schema, unless
 * `--separate` gives each its own database.
 */
const VARIANTS = (options.variants ?? `name=${options.limits === 'off' ? 'limits off' : 'build'}`)
  .split(';')
  .filter(Boolean)
  .map((text) => {
    const fields = Object.fromEntries(text.split(',').map((pair) => pair.split('=')));
    return {
      name: fields.name ?? text,
      dist: resolve(fields.dist ?? options.dist),
      limits: fields.limits ?? options.limits,
      nodeEnv: fields['node-env'],
    };
  });
let postmaster;

const { startPostgres } = await import(`${dist}/testing/index.js`);

/** Preloaded with --profile: SIGUSR2 exits normally, so that --cpu-prof writes its file. */
const exitOnSignal = `data:text/javascript,process.on('SIGUSR2',()=>process.exit(0))`;

/**
 * A database made empty on the bench's PostgreSQL, then migrated and given the fleet, the teams
 * and their tokens by a control plane of the build `buildDist` in a child process (set-up.mjs:
 * two builds' schema engines cannot share one process). Resolves with the teams' tokens.
 */
function setUp(database, dataDir, buildDist) {
  const child = fork(fileURLToPath(new URL('./set-up.mjs', import.meta.url)), [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolveTokens, reject) => {
    child.once('message', resolveTokens);
    child.once('exit', (code) => reject(new Error(`set-up exited with ${code}`)));
    child.send({
      dist: buildDist,
      database,
      dataDir,
      hosts: HOSTS,
      gpusPerHost: GPUS_PER_HOST,
      teams: TEAMS,
    });
  });
}

/** The control plane as main.js runs it (serve.mjs) on the database; resolves with its GraphQL URL. */
async function startServer(databaseUrl, dataDir, poolSize, variant) {
  const profiling = PROFILE
    ? [
        '--cpu-prof',
        `--cpu-prof-dir=${join(PROFILE, variant.name.replace(/[^\w.-]+/g, '_'))}`,
        '--import',
        exitOnSignal,
      ]
    : [];
  const nodeArgs = options['server-node-args'].split(' ').filter(Boolean);
  const serve = fileURLToPath(new URL('./serve.mjs', import.meta.url));
  const child = spawn(process.execPath, [...nodeArgs, ...profiling, serve], {
    env: {
      ...process.env,
      GPUSHARDS_BENCH_DIST: variant.dist,
      GPUSHARDS_BENCH_LIMITS: variant.limits,
      ...(variant.nodeEnv === undefined ? {} : { NODE_ENV: variant.nodeEnv }),
      DATABASE_URL: databaseUrl,
      GPUSHARDS_PORT: '0',
      GPUSHARDS_DATA_DIR: dataDir,
      GPUSHARDS_DATABASE_POOL_SIZE: String(poolSize),
      // No agents heartbeat here: hosts must not go OFFLINE during the run.
      GPUSHARDS_HOST_OFFLINE_SECONDS: '86400',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise((resolveUrl, reject) => {
    child.once('exit', (code) => reject(new Error(`control plane exited with ${code}`)));
    lines.on('line', (line) => {
      if (line.includes('control plane listening')) resolveUrl(JSON.parse(line).url);
    });
  });
  return { child, graphqlUrl: `${url}/graphql` };
}

const load = fork(fileURLToPath(new URL('./load.mjs', import.meta.url)), [], {
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
});

/** The postmaster of the throwaway cluster (its command line names the cluster folder). */

/**
 * One case in the load process against `servers`, with the CPU the server, PostgreSQL and the
 * client used. `db`: the variant's database (its tokens and its statistics client).
 */
async function measure(servers, db, job, label = '') {
  const { stats, tokens } = db;
  const serverCpu = () => servers.reduce((sum, { child }) => sum + cpuOf(child.pid), 0);
  // Reset before counting, so that the count taken after the case starts from this one.
  if (STATEMENTS) await stats.query('SELECT pg_stat_statements_reset()');
  const shards = Number((await stats.query('SELECT count(*) AS n FROM shard')).rows[0].n);
  const before = {
    server: serverCpu(),
    postgres: postgresCpu(postmaster),
    statements: await statementCount(stats),
  };
  const answer = new Promise((resolveAnswer) => load.once('message', resolveAnswer));
  load.send({ urls: servers.map((s) => s.graphqlUrl), tokens, ...job });
  const result = await answer;
  if (STATEMENTS) await printStatements(stats, job, result.ms.length, label);
  return {
    ...result,
    shards,
    serverCpuMs: (serverCpu() - before.server) * 1000,
    // Minus the count query itself; includes the background refreshes during the case.
    statements: (await statementCount(stats)) - before.statements - 1,
    postgresCpuMs: (postgresCpu(postmaster) - before.postgres) * 1000,
  };
}

/** One case's figures (numbers; `format` prints them). */
function summary(name, result) {
  const ms = result.ms.filter((m) => m >= 0).sort((a, b) => a - b);
  const at = (q) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))] ?? NaN;
  const failures = {};
  for (const code of result.failures) failures[code] = (failures[code] ?? 0) + 1;
  const perRequest = (cpuMs) => cpuMs / Math.max(1, result.ms.length);
  return {
    case: name,
    // Shards in the database when the case began (ended ones too: none end here).
    shards: result.shards,
    requests: result.ms.length,
    failures: JSON.stringify(failures),
    'ok/s': ms.length / result.elapsed,
    'p50 ms': at(0.5),
    'p99 ms': at(0.99),
    'max ms': ms.at(-1) ?? NaN,
    // CPU milliseconds per request: the control plane(s), PostgreSQL, the load generator.
    'server cpu': perRequest(result.serverCpuMs),
    'pg cpu': perRequest(result.postgresCpuMs),
    'client cpu': perRequest(result.cpuMs),
    'sql/req': result.statements / Math.max(1, result.ms.length),
  };
}

const DIGITS = {
  'ok/s': 0,
  'p50 ms': 1,
  'p99 ms': 1,
  'max ms': 1,
  'server cpu': 2,
  'pg cpu': 2,
  'client cpu': 2,
  'sql/req': 2,
};
function format(row) {
  return Object.fromEntries(
    Object.entries(row).map(([key, value]) => [
      key,
      typeof value === 'number' && key in DIGITS ? value.toFixed(DIGITS[key]) : value,
    ]),
  );
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * How fast this box runs fixed work now: CPU milliseconds of a fixed JavaScript and hashing
 * workload in this process (about 120-150 ms on an idle 2-core development VM). Load on a shared VM
 * inflates every CPU-per-request figure by about as much as it inflates this one.
 */
function boxSpeed() {
  const started = process.cpuUsage();
  let length = 0;
  const objects = [];
  for (let i = 0; i < 300_000; i++) {
    objects.push({ a: i, b: String(i) });
    length += JSON.stringify(objects[objects.length - 1]).length;
    if (objects.length > 1000) objects.length = 0;
  }
  for (let i = 0; i < 20_000; i++) createHash('sha256').update(String(i)).digest('hex');
  const used = process.cpuUsage(started);
  return length > 0 ? (used.user + used.system) / 1000 : NaN;
}

// pg_stat_statements counts the statements (BEGIN and COMMIT included) each request costs.
const server = await startPostgres({
  settings: {
    shared_preload_libraries: 'pg_stat_statements',
    'pg_stat_statements.track': 'top',
    'pg_stat_statements.track_planning': STATEMENTS ? 'on' : 'off',
    // Durable as in production (the test helper turns fsync off), unless --no-fsync.
    fsync: options['no-fsync'] ? 'off' : 'on',
    full_page_writes: options['no-fsync'] ? 'off' : 'on',
  },
});
/** Creates and drops the bench's databases. */
const superuser = new pg.Client({ connectionString: server.url });
await superuser.connect();
/** Statements run in the bench database of `stats` so far (pg_stat_statements). */
async function statementCount(stats) {
  const { rows } = await stats.query(
    `SELECT coalesce(sum(calls), 0)::bigint AS calls FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  return Number(rows[0].calls);
}
/**
 * What PostgreSQL spent its time on during one case, per request, most expensive first; and
 * the tables with the most dead rows (left by updates and deletes until VACUUM).
 */
async function printStatements(stats, job, requests, label) {
  const { rows } = await stats.query(
    `SELECT calls, rows, total_plan_time AS plan, total_exec_time AS exec, max_exec_time AS max, query FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      ORDER BY total_plan_time + total_exec_time DESC LIMIT 16`,
  );
  console.log(
    `statements, ${label}${job.operation} ${job.rate ? `at ${job.rate} req/s` : 'closed loop'}:`,
  );
  console.table(
    rows.map((row) => ({
      'calls/req': (Number(row.calls) / Math.max(1, requests)).toFixed(3),
      // Rows returned (or changed): the batch statement returns one per shard written, and one
      // when it wrote none.
      'rows/req': (Number(row.rows) / Math.max(1, requests)).toFixed(3),
      'plan ms/call': (row.plan / Number(row.calls)).toFixed(3),
      'exec ms/call': (row.exec / Number(row.calls)).toFixed(3),
      'max exec ms': Number(row.max).toFixed(1),
      query: row.query.replace(/\s+/g, ' ').slice(0, 70),
    })),
  );
  const { rows: tables } = await stats.query(
    `SELECT relname AS table, n_live_tup AS live, n_dead_tup AS dead,
            autovacuum_count AS autovacuums, autoanalyze_count AS autoanalyzes
       FROM pg_stat_user_tables ORDER BY n_dead_tup DESC LIMIT 4`,
  );
  console.table(tables);
}
/**
 * A database of its own, migrated by the build `buildDist`, with the fleet, the teams and
 * their tokens set up, and a client for its statistics.
 */
async function benchDatabase(buildDist) {
  const name = `gpushards_bench_${randomBytes(6).toString('hex')}`;
  await superuser.query(`CREATE DATABASE "${name}"`);
  const config = { url: server.urlFor(name), embeddedDataDir: '', poolSize: 5 };
  const dataDir = await mkdtemp(join(os.tmpdir(), 'gpushards-bench-'));
  const db = { name, config, stats: undefined, dataDir, tokens: [] };
  databases.push(db);
  const setupStarted = performance.now();
  db.tokens = await setUp(config, dataDir, buildDist);
  console.log(
    `set up ${HOSTS} hosts × ${GPUS_PER_HOST} GPUs and ${TEAMS} teams in ${Math.round(performance.now() - setupStarted)} ms (${name}, ${buildDist})`,
  );
  db.stats = new pg.Client({ connectionString: config.url });
  await db.stats.connect();
  await db.stats.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  return db;
}
/** Every database made, for the clean-up. */
const databases = [];
/** Per variant: its database and its servers (`--processes` of them). */
const groups = VARIANTS.map((variant) => ({ variant, db: undefined, servers: [] }));
const servers = [];
try {
  if (SEPARATE) {
    for (const group of groups) group.db = await benchDatabase(group.variant.dist);
  } else {
    const shared = await benchDatabase(dist);
    for (const group of groups) group.db = shared;
  }
  for (const group of groups) {
    for (let i = 0; i < PROCESSES; i++) {
      const started = await startServer(
        group.db.config.url,
        group.db.dataDir,
        Number(options.pool),
        group.variant,
      );
      group.servers.push(started);
      servers.push(started);
    }
  }
  postmaster = postmasterOf(server.dir);
  const closed = { seconds: SECONDS, concurrency: CONCURRENCY, keepAlive: KEEP_ALIVE };
  for (const group of groups) {
    await measure(
      group.servers,
      group.db,
      { ...closed, seconds: 2, operation: 'create' },
      `${group.variant.name}, warm-up, `,
    );
  }
  const rows = [];
  // Background work with no requests (the fleet cache's refresh every second, the sweeps).
  const idle = {
    server: servers.reduce((sum, { child }) => sum + cpuOf(child.pid), 0),
    postgres: postgresCpu(postmaster),
  };
  await new Promise((r) => setTimeout(r, 3000));
  console.log(
    `idle: control plane(s) ${(((servers.reduce((sum, { child }) => sum + cpuOf(child.pid), 0) - idle.server) * 1000) / 3).toFixed(0)} ms CPU/s, PostgreSQL ${(((postgresCpu(postmaster) - idle.postgres) * 1000) / 3).toFixed(0)} ms CPU/s`,
  );
  const cases = [
    ...(CASES.has('me')
      ? [
          [
            `reference: { me { id } }, ${CONCURRENCY} in flight`,
            { ...closed, seconds: SECONDS / 2, operation: 'me' },
          ],
        ]
      : []),
    ...(CASES.has('closed')
      ? [[`createShard, closed loop, ${CONCURRENCY} in flight`, { ...closed, operation: 'create' }]]
      : []),
    ...(CASES.has('open') ? RATES : []).map((rate) => [
      `createShard, open loop, ${rate} req/s`,
      { seconds: SECONDS, rate, operation: 'create' },
    ]),
  ];
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 === 1 ? groups : [...groups].reverse();
    for (const { variant, db, servers: serversOf } of order) {
      const speed = boxSpeed();
      for (const [name, job] of cases) {
        rows.push({
          variant: variant.name,
          round,
          'box ms': Math.round(speed),
          ...summary(name, await measure(serversOf, db, job, `${variant.name}, round ${round}, `)),
        });
      }
    }
  }
  console.log(
    `${os.cpus().length} × ${os.cpus()[0]?.model}, Node ${process.version}, ${PROCESSES} control-plane process(es) per variant, pool ${options.pool}, load average ${os
      .loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')}`,
  );
  console.table(rows.map(format));
  if (rows.length > cases.length) {
    console.log(`medians over ${ROUNDS} round(s):`);
    console.table(
      groups.flatMap(({ variant }) =>
        cases.map(([name]) => {
          const of = rows.filter((row) => row.variant === variant.name && row.case === name);
          const med = (key) => median(of.map((row) => row[key]));
          return format({
            variant: variant.name,
            case: name,
            'box ms': Math.round(med('box ms')),
            'ok/s': med('ok/s'),
            'p50 ms': med('p50 ms'),
            'p99 ms': med('p99 ms'),
            'server cpu': med('server cpu'),
            'pg cpu': med('pg cpu'),
            'sql/req': med('sql/req'),
          });
        }),
      ),
    );
  }
} finally {
  load.kill();
  // With --profile the server writes its CPU profile when it exits normally (SIGUSR2).
  for (const { child } of servers) child.kill(PROFILE ? 'SIGUSR2' : 'SIGTERM');
  await Promise.all(
    servers.map(
      ({ child }) => new Promise((r) => (child.exitCode === null ? child.once('exit', r) : r())),
    ),
  );
  for (const { name, stats, dataDir } of databases) {
    await stats?.end();
    await superuser.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    await rm(dataDir, { recursive: true, force: true });
  }
  await superuser.end();
  await server.stop();
}

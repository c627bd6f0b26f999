// The fleet simulator: N simulated agents (agents.mjs, in a few processes, each agent its own
// NATS user from deploy/nats/generate-config.mjs) against real control planes (apps/control-plane
// main.js, as many as --control-planes) through a real nats-server, on a throwaway PostgreSQL
// with fsync on. Registers every host, places a few shards per host through GraphQL, lets the
// fleet run (heartbeats, reconciles, containers that exit on schedule, optional faults), then
// compares the control plane's view with the simulator's and prints what it saw.
//
// Build first (npx nx run-many -t build), then:
//   node bench/fleet-sim/run.mjs [--hosts 1000] [--processes 3] [--control-planes 2]
//     [--shards-per-host 2] [--seconds 60] [--heartbeat 10] [--reconcile 30]
//     [--life 60,3600] [--faults drop=0.01,delay=0.01,...] [--scenarios ingest,create,restart,lose]
//     [--create-seconds 10] [--create-rates 200] [--create-teams 1] [--lose 100]
//     [--offline-seconds 30] [--no-fsync]
//     [--dist apps/control-plane/dist]  (another build of the control plane, to compare; a
//                       comma-separated list gives control plane i the build i modulo its
//                       length, on the database of the last build's migrations: two builds
//                       measured in one window, each control plane's CPU per create apart)
//     [--profile DIR]  (each control plane writes a V8 CPU profile of the ingest window and of
//                       each create case into DIR)
//     [--fence-fields]  (heartbeats carry what an agent with the interposer and the compute
//                       ledger adds: real bytes and activity per shard and GPU, unattributed bytes
//                       per GPU, changing every beat)
//     [--statements-file PREFIX]  (each create case's whole pg_stat_statements, as JSON, into
//                       PREFIX-<case>.json: calls, rows and execution time of every statement)
//     [--pin-control-planes 0 --pin-others 1]  (CPU lists for taskset: the control planes on
//                       some cores, the simulator processes, nats-server and PostgreSQL on others)
import { fork, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';

import pg from 'pg';
import { freePort } from '../control-plane-process.mjs';
import { childrenOf, cpuOf, pin, postgresCpu, postmasterOf } from '../proc-cpu.mjs';
import { quantile } from '../quantile.mjs';
import { graphql, teamToken } from '../graphql.mjs';
import { benchOptions } from '../options.mjs';

const options = benchOptions(import.meta.url, {
  options: {
    hosts: { type: 'string', default: '1000', value: 'count', help: 'simulated hosts (agents)' },
    processes: {
      type: 'string',
      default: '3',
      value: 'count',
      help: 'processes the agents run in',
    },
    'control-planes': { type: 'string', default: '2', value: 'count', help: 'control planes' },
    'shards-per-host': {
      type: 'string',
      default: '2',
      value: 'whole',
      help: 'shards placed per host',
    },
    seconds: {
      type: 'string',
      default: '60',
      value: 'number',
      help: 'seconds the fleet runs (ingest)',
    },
    heartbeat: {
      type: 'string',
      default: '10',
      value: 'number',
      help: "the agents' heartbeat, seconds",
    },
    reconcile: {
      type: 'string',
      default: '30',
      value: 'number',
      help: "the agents' reconcile, seconds",
    },
    life: {
      type: 'string',
      default: '60,3600',
      value: 'counts',
      meta: 'MIN,MAX',
      help: "a container's life before it exits on its own, seconds",
    },
    faults: {
      type: 'string',
      default: '',
      meta: 'KIND=RATE,…',
      help: 'message faults, e.g. drop=0.01,delay=0.01 (none by default)',
    },
    scenarios: {
      type: 'string',
      default: 'ingest',
      choices: ['ingest', 'create', 'restart', 'lose'],
      list: true,
      help: 'what to run, in this order',
    },
    'create-seconds': {
      type: 'string',
      default: '10',
      value: 'number',
      help: 'seconds of each create case',
    },
    'create-rates': {
      type: 'string',
      default: '200',
      value: 'counts',
      help: 'open-loop create rates, per second',
    },
    // The create scenario's calls go round this many teams, each with its own token: one team
    // serialises every batch of both control planes on that team's quota lock.
    'create-teams': {
      type: 'string',
      default: '1',
      value: 'count',
      help: 'teams the creates go round',
    },
    concurrency: {
      type: 'string',
      default: '64',
      value: 'count',
      help: 'creates in flight (closed loop)',
    },
    lose: { type: 'string', default: '100', value: 'count', help: 'hosts lost at once (lose)' },
    'offline-seconds': {
      type: 'string',
      default: '30',
      value: 'count',
      help: 'GPUSHARDS_HOST_OFFLINE_SECONDS',
    },
    pool: {
      type: 'string',
      default: '10',
      value: 'count',
      help: "each control plane's database pool",
    },
    'no-fsync': { type: 'boolean', default: false, help: 'PostgreSQL without fsync' },
    profile: {
      type: 'string',
      meta: 'DIR',
      help: 'each control plane writes V8 CPU profiles here',
    },
    'pin-control-planes': {
      type: 'string',
      meta: 'CPUS',
      help: 'taskset CPU list for the control planes',
    },
    'pin-others': { type: 'string', meta: 'CPUS', help: 'taskset CPU list for everything else' },
    'fence-fields': {
      type: 'boolean',
      default: false,
      help: "heartbeats carry the fence's readings",
    },
    'statements-file': {
      type: 'string',
      meta: 'PREFIX',
      help: "each create case's whole pg_stat_statements, as JSON, into PREFIX-<case>.json",
    },
    dist: {
      type: 'string',
      default: 'apps/control-plane/dist',
      value: 'list',
      help: 'the control-plane builds (dist folders, comma-separated; control plane i runs build i mod n)',
    },
  },
  example:
    'flock /tmp/bench.lock node bench/fleet-sim/run.mjs --hosts 200 --seconds 30 --scenarios ingest,lose',
});
const HOSTS = Number(options.hosts);
const PROCESSES = Number(options.processes);
const CONTROL_PLANES = Number(options['control-planes']);
const SHARDS_PER_HOST = Number(options['shards-per-host']);
const SECONDS = Number(options.seconds);
const SCENARIOS = new Set(options.scenarios.split(',').filter(Boolean));
const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const dists = options.dist.split(',').map((path) => resolve(ROOT, path));
// The database and its migrations: the last build's (the newest, when comparing).
const dist = dists.at(-1);
const faultRates = Object.fromEntries(
  options.faults
    .split(',')
    .filter(Boolean)
    .map((pair) => pair.split('='))
    .map(([kind, rate]) => [kind, Number(rate)]),
);

const { startPostgres, createTestDatabase } = await import(
  pathToFileURL(`${dist}/testing/index.js`).href
);
const { startNatsServer } = await import(
  pathToFileURL(join(ROOT, 'apps/agent/dist/testing/nats-server.js')).href
);

const log = (...args) => console.log(`[${new Date().toISOString().slice(11, 19)}]`, ...args);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------- CPU accounting (/proc) ----------
function rssOf(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return Number(/VmRSS:\s+(\d+)/.exec(status)[1]) * 1024;
  } catch {
    return 0;
  }
}
function natsPid() {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (cmdline[0].endsWith('nats-server') && cmdline.includes(String(natsPort)))
        return Number(entry);
    } catch {
      // gone
    }
  }
  return undefined;
}

/** PostgreSQL's postmaster and its backends, nats-server: the processes beside the simulator. */
function pinOthers() {
  const cpus = options['pin-others'];
  if (cpus === undefined) return;
  pin(natsPid(), cpus);
  pin(pm, cpus);
  for (const pid of childrenOf(pm)) pin(pid, cpus);
}

// ---------- GraphQL ----------

// ---------- processes ----------
/** With --profile: SIGUSR2 starts and stops a profile of one case (bench/profile-window.mjs). */
const profiling = options.profile
  ? ['--import', pathToFileURL(join(ROOT, 'bench/profile-window.mjs')).href]
  : [];
const toggleProfiles = () => {
  if (options.profile) for (const cp of controlPlanes) cp.child.kill('SIGUSR2');
};

async function startControlPlane(index) {
  const dataDir = dataDirs[index];
  const port = await freePort();
  const build = dists[index % dists.length];
  const child = spawn(process.execPath, [...profiling, join(build, 'main.js')], {
    env: {
      ...process.env,
      DATABASE_URL: database.config.url,
      GPUSHARDS_PORT: String(port),
      GPUSHARDS_HOST: '127.0.0.1',
      GPUSHARDS_DATA_DIR: dataDir,
      GPUSHARDS_DATABASE_POOL_SIZE: options.pool,
      GPUSHARDS_LOG_LEVEL: 'warn',
      GPUSHARDS_HOST_OFFLINE_SECONDS: options['offline-seconds'],
      GPUSHARDS_NATS_URL: nats.url,
      GPUSHARDS_NATS_NKEY_SEED_FILE: nats.controlPlane.seedFile,
      ...(options.profile ? { PROFILE_WINDOW_DIR: resolve(options.profile) } : {}),
      // One token creates every shard here: the API's rate limits are not what is measured.
      GPUSHARDS_RATE_LIMIT_PER_SECOND: '1000000',
      GPUSHARDS_RATE_LIMIT_BURST: '1000000',
      GPUSHARDS_MAX_CONCURRENT_REQUESTS: '10000',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  pin(child.pid, options['pin-control-planes']);
  const lines = createInterface({ input: child.stdout });
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  lines.on('line', (line) => {
    if (line.includes('"level":50') || line.includes('"level":40')) warnings.push(line);
  });
  let exited = false;
  child.once('exit', () => (exited = true));
  const url = `http://127.0.0.1:${port}`;
  for (;;) {
    if (exited) throw new Error(`control plane exited: ${stderr}`);
    try {
      if ((await fetch(`${url}/metrics`)).ok) break;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  return { child, graphqlUrl: `${url}/graphql`, dataDir, build };
}
/**
 * The control planes' agent messages that failed (gpushards_agent_messages_total, outcome
 * failed: the database could not be reached in time), summed by kind since they started.
 */
async function failedAgentMessages() {
  const failed = {};
  for (const cp of controlPlanes) {
    const text = await (await fetch(cp.graphqlUrl.replace(/graphql$/, 'metrics'))).text();
    for (const line of text.split('\n')) {
      if (!line.startsWith('gpushards_agent_messages_total{') || !line.includes('outcome="failed"'))
        continue;
      const kind = /kind="(\w+)"/.exec(line)[1];
      failed[kind] = (failed[kind] ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return failed;
}
async function stopControlPlane(cp, signal = 'SIGTERM') {
  if (cp.child.exitCode !== null) return;
  const exited = new Promise((r) => cp.child.once('exit', r));
  cp.child.kill(signal);
  await exited;
}

function startWorkers(hostIds) {
  const per = Math.ceil(hostIds.length / PROCESSES);
  const workers = [];
  for (let p = 0; p < PROCESSES; p++) {
    const slice = hostIds.slice(p * per, (p + 1) * per);
    if (slice.length === 0) continue;
    const child = fork(fileURLToPath(new URL('./agents.mjs', import.meta.url)), [], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    pin(child.pid, options['pin-others']);
    const worker = { child, hostIds: slice };
    child.once('exit', (code) => {
      if (code !== 0 && cleaning === undefined) {
        log(`a simulator process exited with ${code}; stopping`);
        void cleanUp().finally(() => process.exit(1));
      }
    });
    child.on('message', (message) => {
      if (message.type === 'launched') {
        launches.push(message.shardId);
        if (!launchArrived.has(message.shardId)) launchArrived.set(message.shardId, message.at);
      }
    });
    workers.push(worker);
  }
  return workers;
}
function ask(worker, message, answer) {
  return new Promise((r) => {
    const on = (reply) => {
      if (reply.type === answer) {
        worker.child.off('message', on);
        r(reply);
      }
    };
    worker.child.on('message', on);
    worker.child.send(message);
  });
}

const ms = (v) => (Number.isNaN(v) ? '-' : `${v.toFixed(1)} ms`);

// ---------- the run ----------
const warnings = [];
const lostHosts = new Set();
const createdAt = new Map();
const launchArrived = new Map();
const launches = [];
const hostIds = Array.from({ length: HOSTS }, (_, i) => `host-${String(i).padStart(4, '0')}`);
const fsync = options['no-fsync'] ? 'off' : 'on';
const pgServer = await startPostgres({
  settings: {
    fsync,
    full_page_writes: fsync,
    // Statements per createShard (the create scenario); BEGIN and COMMIT included.
    shared_preload_libraries: 'pg_stat_statements',
    'pg_stat_statements.track': 'top',
  },
});
const database = await createTestDatabase('postgres', { server: pgServer });
await database.prisma.close();
const stats = new pg.Client({ connectionString: database.config.url });
await stats.connect();
await stats.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
// WAL by record kind over the ingest window (pg_get_wal_stats).
await stats.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
const pm = postmasterOf(pgServer.dir);
const generated = performance.now();
const nats = await startNatsServer(hostIds, 'nkey');
const natsPort = new URL(nats.url).port;
log(`nats-server with ${HOSTS + 1} nkey users in ${Math.round(performance.now() - generated)} ms`);
const dataDirs = await Promise.all(
  Array.from({ length: CONTROL_PLANES }, () => mkdtemp(join(os.tmpdir(), 'gpushards-fleet-sim-'))),
);
const controlPlanes = [];
let workers = [];
const results = {};
let cleaning;
/** Stops everything this run started (also on SIGTERM/SIGINT, or when a worker dies). */
function cleanUp() {
  cleaning ??= (async () => {
    if (warnings.length > 0) {
      log(`${warnings.length} warning/error log lines from the control planes; first ones:`);
      for (const line of warnings.slice(0, 5)) console.log(`  ${line.slice(0, 300)}`);
      const file = join(os.tmpdir(), `fleet-sim-warnings-${process.pid}.log`);
      await writeFile(file, warnings.join('\n') + '\n');
      log(`all of them in ${file}`);
    }
    for (const worker of workers) {
      if (worker.child.exitCode === null) {
        await Promise.race([ask(worker, { type: 'stop' }, 'stopped'), sleep(10_000)]);
      }
      worker.child.kill();
    }
    for (const cp of controlPlanes) {
      await stopControlPlane(cp).catch(() => undefined);
    }
    await nats.stop().catch(() => undefined);
    await stats.end().catch(() => undefined);
    await database.cleanup().catch(() => undefined);
    await pgServer.stop().catch(() => undefined);
    for (const dir of dataDirs) await rm(dir, { recursive: true, force: true });
  })();
  return cleaning;
}
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.once(signal, () => {
    log(`${signal}: stopping what this run started`);
    void cleanUp().finally(() => process.exit(1));
  });
}
try {
  for (let i = 0; i < CONTROL_PLANES; i++) controlPlanes.push(await startControlPlane(i));
  // PostgreSQL's backends started from now on inherit the postmaster's CPU list.
  pinOthers();
  const admin = (await readFile(join(dataDirs[0], 'admin-token'), 'utf8')).trim();
  const url = controlPlanes[0].graphqlUrl;
  /** A team with room for the whole run, and a MEMBER token of it. */
  const memberToken = (name) =>
    teamToken(url, admin, { team: name, maxTotal: '5000t', tokenName: 'fleet-sim' });
  const token = await memberToken('fleet-sim');

  // Register the fleet.
  const started = performance.now();
  const cpuBeforeRegister = {
    controlPlanes: controlPlanes.map((cp) => cpuOf(cp.child.pid)),
    postgres: postgresCpu(pm),
  };
  workers = startWorkers(hostIds);
  const life = options.life.split(',').map(Number);
  await Promise.all(
    workers.map((worker, p) =>
      ask(
        worker,
        {
          type: 'start',
          hosts: worker.hostIds.map((hostId) => ({
            hostId,
            index: hostIds.indexOf(hostId),
            auth: nats.agent(hostId),
          })),
          servers: [nats.url],
          heartbeatSeconds: Number(options.heartbeat),
          reconcileSeconds: Number(options.reconcile),
          lifeSeconds: life,
          faults: { rates: faultRates },
          fenceFields: options['fence-fields'],
          process: p,
        },
        'started',
      ),
    ),
  );
  results.register = `${HOSTS} hosts registered in ${Math.round(performance.now() - started)} ms`;
  log(results.register);
  // What the registrations cost, with the heartbeats and reconciles of the agents registered
  // meanwhile (each agent starts them once registered), per registration.
  const perHost = (seconds) => Number(((seconds * 1000) / HOSTS).toFixed(3));
  results.registerCpu = {
    'control planes, CPU ms per registration': controlPlanes.map((cp, i) =>
      perHost(cpuOf(cp.child.pid) - cpuBeforeRegister.controlPlanes[i]),
    ),
    'PostgreSQL, CPU ms per registration': perHost(postgresCpu(pm) - cpuBeforeRegister.postgres),
    'agent messages failed in the control planes, by kind': await failedAgentMessages(),
  };
  log('registration', results.registerCpu);

  // A few shards per host, through GraphQL, spread over both control planes.
  const placeStarted = performance.now();
  const total = HOSTS * SHARDS_PER_HOST;
  const createMs = [];
  const failures = {};
  let next = 0;
  const sizes = ['4g', '8g', '12g', '20g'];
  const create = async (i) => {
    const input = {
      name: `sim-${i}`,
      image: 'example/train:1',
      memoryPerGpu: sizes[i % sizes.length],
      gpuCount: i % 5 === 0 ? 2 : 1,
    };
    const sent = Date.now();
    const t = performance.now();
    const body = await graphql(
      controlPlanes[i % controlPlanes.length].graphqlUrl,
      'mutation ($input: CreateShardInput!) { createShard(input: $input) { id } }',
      { input },
      token,
    );
    createMs.push(performance.now() - t);
    if (body.errors) {
      const code = body.errors[0]?.extensions?.code ?? 'ERROR';
      failures[code] = (failures[code] ?? 0) + 1;
      return;
    }
    createdAt.set(body.data.createShard.id, sent);
  };
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < total) await create(next++);
    }),
  );
  const placeSeconds = (performance.now() - placeStarted) / 1000;
  log(
    `${total} shards created in ${placeSeconds.toFixed(1)} s (p50 ${ms(quantile(createMs, 0.5))}, p99 ${ms(quantile(createMs, 0.99))}), failures ${JSON.stringify(failures)}`,
  );
  const launched = () => [...createdAt.keys()].filter((id) => launchArrived.has(id)).length;
  await waitFor(
    'every launch to reach its agent',
    () => launched() >= createdAt.size,
    60_000,
  ).catch((error) => {
    log(`${launched()}/${createdAt.size} launched; ${launches.length} launch commands`);
    throw error;
  });
  const launchedAt = new Map(
    [...createdAt].map(([id, sent]) => [id, launchArrived.get(id) - sent]),
  );
  results.launch = `createShard → launch at the agent: p50 ${ms(quantile([...launchedAt.values()], 0.5))}, p99 ${ms(quantile([...launchedAt.values()], 0.99))}, ${launchedAt.size}/${createdAt.size} launched`;
  log(results.launch);

  if (SCENARIOS.has('ingest')) await ingest();
  if (SCENARIOS.has('create')) {
    const tokens = [token];
    for (let t = 1; t < Number(options['create-teams']); t++) {
      tokens.push(await memberToken(`fleet-sim-${t}`));
    }
    await createUnderHeartbeats(tokens);
  }
  if (SCENARIOS.has('restart')) await restart();
  if (SCENARIOS.has('lose')) await lose();
  if (!SCENARIOS.has('ingest')) await sleep(SECONDS * 1000);

  // Let in-flight state events land (and, with faults, a reconcile round repair what was
  // dropped), then compare.
  const settleStarted = performance.now();
  await waitFor(
    'no shard left PLACED or STARTING',
    async () => {
      const { rows } = await stats.query(
        `SELECT count(*)::int AS n FROM shard WHERE state::text IN ('PLACED','STARTING')
            AND NOT (host_id = ANY($1))`,
        [[...lostHosts]],
      );
      return rows[0].n === 0;
    },
    Number(options.reconcile) * 2000 + 10_000,
  ).catch(() => log('some shards still PLACED/STARTING; comparing anyway'));
  results.settleMs = Math.round(performance.now() - settleStarted);
  await sleep(2000);
  await compare();
  if (results.check.problems > 0) {
    // Faults may have dropped the event that says so; a reconcile round repairs it.
    log(`${results.check.problems} problem(s); comparing again after one reconcile interval`);
    results.firstCheck = results.check;
    await sleep(Number(options.reconcile) * 1000 + 5000);
    await compare();
  }
} finally {
  await cleanUp();
}
console.log(JSON.stringify(results, null, 2));

async function waitFor(what, probe, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

/** Writes per second to PostgreSQL, from pg_stat_database. */
async function pgCounters() {
  const { rows } = await stats.query(
    `SELECT xact_commit::bigint AS commits, (tup_inserted + tup_updated + tup_deleted)::bigint AS rows,
            (SELECT wal_sync FROM pg_stat_wal)::bigint AS syncs,
            (SELECT wal_records FROM pg_stat_wal)::bigint AS records,
            (SELECT wal_bytes FROM pg_stat_wal)::bigint AS "walBytes",
            (SELECT wal_fpi FROM pg_stat_wal)::bigint AS fpi,
            pg_current_wal_insert_lsn()::text AS lsn,
            (SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
            )::bigint AS statements
       FROM pg_stat_database WHERE datname = current_database()`,
  );
  return {
    commits: Number(rows[0].commits),
    rows: Number(rows[0].rows),
    syncs: Number(rows[0].syncs),
    records: Number(rows[0].records),
    walBytes: Number(rows[0].walBytes),
    fpi: Number(rows[0].fpi),
    lsn: rows[0].lsn,
    statements: Number(rows[0].statements),
  };
}

/** Row writes per table since the window began: updates, of them HOT, inserts. */
async function tableWrites() {
  const { rows } = await stats.query(
    `SELECT relname AS table, n_tup_upd::bigint AS updated, n_tup_hot_upd::bigint AS hot,
            n_tup_ins::bigint AS inserted
       FROM pg_stat_user_tables`,
  );
  return new Map(rows.map((row) => [row.table, row]));
}

/** Heartbeat ingest at the production interval: CPU per process, PostgreSQL writes. */
async function ingest() {
  // One full heartbeat interval to settle, then measure over SECONDS.
  await sleep(Number(options.heartbeat) * 1000);
  const cpu = () => ({
    controlPlanes: controlPlanes.map((cp) => cpuOf(cp.child.pid)),
    postgres: postgresCpu(pm),
    nats: cpuOf(natsPid()),
    simulator: workers.reduce((s, w) => s + cpuOf(w.child.pid), 0),
  });
  pinOthers();
  await stats.query('SELECT pg_stat_statements_reset()');
  const tablesBefore = await tableWrites();
  const before = { cpu: cpu(), pg: await pgCounters(), at: performance.now() };
  const heartbeatsBefore = await messageCounts();
  toggleProfiles();
  await sleep(SECONDS * 1000);
  toggleProfiles();
  const after = { cpu: cpu(), pg: await pgCounters(), at: performance.now() };
  const heartbeatsAfter = await messageCounts();
  const seconds = (after.at - before.at) / 1000;
  const pct = (a, b) => `${(((a - b) / seconds) * 100).toFixed(1)}%`;
  const heartbeats = heartbeatsAfter.total - heartbeatsBefore.total;
  // Per heartbeat, everything of the window: reconciles, state events, the fleet cache's reads.
  const per = (key) => ((after.pg[key] - before.pg[key]) / Math.max(1, heartbeats)).toFixed(2);
  const tablesAfter = await tableWrites();
  const writesPerHeartbeat = {};
  for (const [table, row] of tablesAfter) {
    const was = tablesBefore.get(table);
    const delta = (key) => Number(row[key]) - Number(was?.[key] ?? 0);
    if (delta('updated') + delta('inserted') === 0) continue;
    writesPerHeartbeat[table] =
      `${(delta('updated') / Math.max(1, heartbeats)).toFixed(2)} updated ` +
      `(${(delta('hot') / Math.max(1, heartbeats)).toFixed(2)} HOT), ` +
      `${(delta('inserted') / Math.max(1, heartbeats)).toFixed(2)} inserted`;
  }
  const { rows: walKinds } = await stats.query(
    `SELECT "resource_manager/record_type" AS kind, count, fpi_size AS fpi,
            combined_size AS bytes
       FROM pg_get_wal_stats($1::pg_lsn, $2::pg_lsn, true)
      WHERE count > 0 ORDER BY count DESC LIMIT 12`,
    [before.pg.lsn, after.pg.lsn],
  );
  const { rows: topStatements } = await stats.query(
    `SELECT calls, total_exec_time AS exec, query FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      ORDER BY calls DESC LIMIT 12`,
  );
  /** CPU ms per heartbeat: a control plane's over the heartbeats it handled, the others' over all. */
  const perBeat = (a, b, n) => ((a - b) * 1000) / Math.max(1, n);
  results.ingest = {
    seconds: Math.round(seconds),
    heartbeatsPerSecond: (heartbeats / seconds).toFixed(1),
    heartbeatsPerSecondByControlPlane: heartbeatsAfter.byControlPlane.map((n, i) =>
      ((n - heartbeatsBefore.byControlPlane[i]) / seconds).toFixed(1),
    ),
    cpuMsPerHeartbeat: {
      controlPlanes: after.cpu.controlPlanes.map((c, i) =>
        perBeat(
          c,
          before.cpu.controlPlanes[i],
          heartbeatsAfter.byControlPlane[i] - heartbeatsBefore.byControlPlane[i],
        ).toFixed(3),
      ),
      postgres: perBeat(after.cpu.postgres, before.cpu.postgres, heartbeats).toFixed(3),
      nats: perBeat(after.cpu.nats, before.cpu.nats, heartbeats).toFixed(3),
      simulator: perBeat(after.cpu.simulator, before.cpu.simulator, heartbeats).toFixed(3),
    },
    controlPlaneCpu: after.cpu.controlPlanes.map((c, i) => pct(c, before.cpu.controlPlanes[i])),
    postgresCpu: pct(after.cpu.postgres, before.cpu.postgres),
    natsCpu: pct(after.cpu.nats, before.cpu.nats),
    simulatorCpu: pct(after.cpu.simulator, before.cpu.simulator),
    // Every transaction, reads included (reconciles, the fleet cache's refresh).
    postgresCommitsPerSecond: ((after.pg.commits - before.pg.commits) / seconds).toFixed(1),
    // WAL flushes to disk: the durable write commits (the whole cluster).
    postgresWalSyncsPerSecond: ((after.pg.syncs - before.pg.syncs) / seconds).toFixed(1),
    postgresWalRecordsPerSecond: ((after.pg.records - before.pg.records) / seconds).toFixed(1),
    postgresRowsWrittenPerSecond: ((after.pg.rows - before.pg.rows) / seconds).toFixed(1),
    perHeartbeat: {
      statements: per('statements'),
      commits: per('commits'),
      walRecords: per('records'),
      walBytes: per('walBytes'),
      walFullPageImages: per('fpi'),
      rowsWritten: per('rows'),
    },
    writesPerHeartbeat,
    controlPlaneRssMiB: controlPlanes.map((cp) => Math.round(rssOf(cp.child.pid) / 2 ** 20)),
  };
  log('heartbeat ingest', results.ingest);
  log('WAL per heartbeat by record kind (the whole cluster, pg_walinspect)');
  console.table(
    walKinds.map((row) => ({
      kind: row.kind,
      'records/hb': (Number(row.count) / Math.max(1, heartbeats)).toFixed(2),
      'page image bytes/hb': (Number(row.fpi) / Math.max(1, heartbeats)).toFixed(0),
      'bytes/hb': (Number(row.bytes) / Math.max(1, heartbeats)).toFixed(0),
    })),
  );
  log('SQL statements per heartbeat (pg_stat_statements, the most called)');
  console.table(
    topStatements.map((row) => ({
      'calls/hb': (Number(row.calls) / Math.max(1, heartbeats)).toFixed(3),
      'exec ms/hb': (row.exec / Math.max(1, heartbeats)).toFixed(4),
      query: row.query.replace(/\s+/g, ' ').slice(0, 100),
    })),
  );
}

/** Heartbeats handled by the control planes so far, from their /metrics: each one's, and all. */
async function messageCounts() {
  const byControlPlane = [];
  for (const cp of controlPlanes) {
    const text = await (await fetch(cp.graphqlUrl.replace('/graphql', '/metrics'))).text();
    let handled = 0;
    for (const m of text.matchAll(
      /gpushards_agent_messages_total\{kind="heartbeat",outcome="handled"\} (\d+)/g,
    )) {
      handled += Number(m[1]);
    }
    byControlPlane.push(handled);
  }
  return { byControlPlane, total: byControlPlane.reduce((sum, n) => sum + n, 0) };
}

/**
 * The control planes' counters that say what a create case set off, summed over both: agent
 * messages by kind and outcome, admission passes, placements.
 */
async function fleetCounters() {
  const counters = new Map();
  for (const cp of controlPlanes) {
    const text = await (await fetch(cp.graphqlUrl.replace('/graphql', '/metrics'))).text();
    for (const m of text.matchAll(
      /^(gpushards_agent_messages_total\{[^}]*\}|gpushards_admission_pass_seconds_count|gpushards_placement_duration_seconds_count\{[^}]*\}) (\d+)/gm,
    )) {
      counters.set(m[1], (counters.get(m[1]) ?? 0) + Number(m[2]));
    }
  }
  return counters;
}

/**
 * createShard while every host heartbeats: closed loop, then open loop at each rate, from
 * bench/control-plane/load.mjs in its own process (plain sockets, about 0.05 ms of CPU per
 * request; fetch cost 0.35-0.6 ms, taken from the same two cores). Per case: the CPU per
 * request of the control planes, PostgreSQL, nats-server and the simulator, and the SQL
 * statements per request (pg_stat_statements; heartbeats, state events and reconciles of the
 * same window included, so that what a createShard sets off is counted too).
 */
async function createUnderHeartbeats(tokens) {
  const seconds = Number(options['create-seconds']);
  const urls = controlPlanes.map((cp) => cp.graphqlUrl);
  const load = fork(fileURLToPath(new URL('../control-plane/load.mjs', import.meta.url)), [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const cpu = () => ({
    controlPlanes: controlPlanes.reduce((sum, cp) => sum + cpuOf(cp.child.pid), 0),
    each: controlPlanes.map((cp) => cpuOf(cp.child.pid)),
    postgres: postgresCpu(pm),
    nats: cpuOf(natsPid()),
    simulator: workers.reduce((sum, w) => sum + cpuOf(w.child.pid), 0),
  });
  const statements = async () =>
    Number(
      (
        await stats.query(
          `SELECT coalesce(sum(calls), 0)::bigint AS n FROM pg_stat_statements
            WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        )
      ).rows[0].n,
    );
  const run = async (name, job) => {
    // Read first: /metrics runs the collectors' queries, which are not the case's work.
    const countersBefore = await fleetCounters();
    await stats.query('SELECT pg_stat_statements_reset()');
    const before = { cpu: cpu(), statements: await statements(), counters: countersBefore };
    const answer = new Promise((r) => load.once('message', r));
    toggleProfiles();
    load.send({ urls, tokens, keepAlive: true, operation: 'create', ...job });
    const result = await answer;
    toggleProfiles();
    const after = { cpu: cpu(), statements: await statements() };
    if (options['statements-file'] !== undefined) {
      const { rows: all } = await stats.query(
        `SELECT calls::int, rows::int, total_exec_time AS exec, query FROM pg_stat_statements
          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          ORDER BY total_exec_time DESC`,
      );
      const file = `${options['statements-file']}-${name.replace(/[^a-z0-9]+/gi, '-')}.json`;
      await writeFile(file, JSON.stringify({ requests: result.ms.length, statements: all }));
    }
    const { rows: top } = await stats.query(
      `SELECT calls, rows, total_exec_time AS exec, query FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
        ORDER BY total_exec_time DESC LIMIT 12`,
    );
    after.counters = await fleetCounters();
    const ok = result.ms.filter((m) => m >= 0);
    const n = Math.max(1, result.ms.length);
    const perRequest = (key) => (((after.cpu[key] - before.cpu[key]) * 1000) / n).toFixed(2);
    const failures = {};
    for (const code of result.failures) failures[code] = (failures[code] ?? 0) + 1;
    const line =
      `${name}: ${(ok.length / result.elapsed).toFixed(0)}/s, p50 ${ms(quantile(ok, 0.5))}, ` +
      `p99 ${ms(quantile(ok, 0.99))}, max ${ms(quantile(ok, 1))}, failures ${JSON.stringify(failures)}; ` +
      `CPU ms per request: control planes ${perRequest('controlPlanes')}, PostgreSQL ${perRequest('postgres')}, ` +
      `nats-server ${perRequest('nats')}, simulator ${perRequest('simulator')}, load generator ${(result.cpuMs / n).toFixed(2)}; ` +
      `SQL statements per request ${((after.statements - before.statements - 1) / n).toFixed(2)}`;
    log(line);
    if (dists.length > 1) {
      // load.mjs sends request k to control plane k modulo their number.
      const each = controlPlanes.map((cp, i) => {
        const served = Math.ceil((result.ms.length - i) / controlPlanes.length);
        const ms = ((after.cpu.each[i] - before.cpu.each[i]) * 1000) / Math.max(1, served);
        return `${i} (${cp.build.replace(ROOT + '/', '')}): ${ms.toFixed(2)}`;
      });
      log(`control-plane CPU ms per request it served: ${each.join(', ')}`);
    }
    const counted = {};
    for (const [key, value] of after.counters) {
      const delta = value - (before.counters.get(key) ?? 0);
      if (delta > 0) counted[key.replace('gpushards_', '')] = (delta / n).toFixed(3);
    }
    log("per request, from the control planes' counters", counted);
    console.table(
      top.map((row) => ({
        'calls/req': (Number(row.calls) / n).toFixed(3),
        // The batch statement returns one row per shard written, and one when it wrote none.
        'rows/req': (Number(row.rows) / n).toFixed(3),
        'exec ms/call': (row.exec / Number(row.calls)).toFixed(3),
        'exec ms/req': (row.exec / n).toFixed(3),
        query: row.query.replace(/\s+/g, ' ').slice(0, 90),
      })),
    );
    return line;
  };
  try {
    results.createClosed = await run(`closed loop, ${options.concurrency} in flight`, {
      seconds,
      concurrency: Number(options.concurrency),
    });
    for (const rate of options['create-rates'].split(',').map(Number)) {
      results[`createOpen${rate}`] = await run(`open loop ${rate}/s`, { seconds, rate });
    }
  } finally {
    load.kill();
  }
}

/** Every control plane restarted while the agents run: time until all are ONLINE and reconciled. */
async function restart() {
  const launchesBefore = launches.length;
  const t = performance.now();
  for (const cp of controlPlanes) await stopControlPlane(cp);
  const stoppedAt = performance.now();
  for (let i = 0; i < controlPlanes.length; i++) controlPlanes[i] = await startControlPlane(i);
  const up = performance.now();
  await waitFor(
    'every host ONLINE with a heartbeat after the restart',
    async () => {
      const { rows } = await stats.query(
        `SELECT count(*)::int AS n FROM host WHERE state = 'ONLINE' AND last_heartbeat_at > $1`,
        [new Date(Date.now() - (performance.now() - up))],
      );
      return rows[0].n === HOSTS;
    },
    120_000,
  );
  const online = performance.now();
  const since = Date.now() - (performance.now() - up);
  await waitFor(
    'every agent reconciled with a restarted control plane',
    async () => {
      const counts = await Promise.all(
        workers.map((w) => ask(w, { type: 'reconciled', since }, 'reconciled')),
      );
      return counts.reduce((sum, c) => sum + c.count, 0) === HOSTS - lostHosts.size;
    },
    180_000,
  );
  const reconciled = performance.now();
  results.restart = `${controlPlanes.length} control plane(s) stopped in ${Math.round(stoppedAt - t)} ms, up again in ${Math.round(up - stoppedAt)} ms; every host ONLINE with a fresh heartbeat ${Math.round(online - up)} ms after, every agent reconciled ${Math.round(reconciled - up)} ms after; launch commands during the restart: ${launches.length - launchesBefore}`;
  log(results.restart);
}

/**
 * --lose hosts stop at once: time until OFFLINE and their reservations released, and the CPU
 * the marking costs: the control planes' and PostgreSQL's from the first moment a lost host can
 * be past the offline deadline to the last host marked, less what they spent at the rate of
 * the window from the loss to that moment (the heartbeats of the hosts still running).
 */
async function lose() {
  const count = Number(options.lose);
  const lost = hostIds.slice(0, count);
  const perWorker = workers.map((w) => w.hostIds.filter((h) => lost.includes(h)));
  const cpu = () => ({
    controlPlanes: controlPlanes.reduce((sum, cp) => sum + cpuOf(cp.child.pid), 0),
    postgres: postgresCpu(pm),
  });
  const t = performance.now();
  const atLoss = cpu();
  await Promise.all(
    workers.map((w, k) =>
      perWorker[k].length > 0 ? ask(w, { type: 'lose', hostIds: perWorker[k] }, 'lost') : undefined,
    ),
  );
  for (const w of workers) w.hostIds = w.hostIds.filter((h) => !lost.includes(h));
  const condition = async () => {
    const { rows } = await stats.query(
      `SELECT (SELECT count(*) FROM host WHERE id = ANY($1) AND state = 'OFFLINE')::int AS offline,
              (SELECT coalesce(sum(reserved_bytes), 0) FROM gpu WHERE host_id = ANY($1))::bigint AS reserved`,
      [lost],
    );
    return rows[0].offline === count && Number(rows[0].reserved) === 0;
  };
  // The earliest a lost host can be past the deadline: its last heartbeat came up to one
  // interval before the loss.
  const deadlineMs = (Number(options['offline-seconds']) - Number(options.heartbeat)) * 1000;
  await sleep(deadlineMs - (performance.now() - t));
  const atDeadline = cpu();
  const tDeadline = performance.now();
  await waitFor('the lost hosts OFFLINE with nothing reserved', condition, 300_000);
  const atMarked = cpu();
  const markingMs = performance.now() - tDeadline;
  const excessMs = (key) => {
    const rate = (atDeadline[key] - atLoss[key]) / (tDeadline - t);
    return Math.round((atMarked[key] - atDeadline[key] - rate * markingMs) * 1000);
  };
  results.lose = `${count} hosts lost at once: OFFLINE with reservations released after ${Math.round(performance.now() - t)} ms (GPUSHARDS_HOST_OFFLINE_SECONDS=${options['offline-seconds']}); from the earliest deadline to all marked ${Math.round(markingMs)} ms, CPU above the heartbeats' rate: control planes ${excessMs('controlPlanes')} ms, PostgreSQL ${excessMs('postgres')} ms`;
  log(results.lose);
  for (const hostId of lost) lostHosts.add(hostId);
}

/** The control plane's view against the simulator's, and the invariants. */
async function compare() {
  const views = await Promise.all(workers.map((w) => ask(w, { type: 'view' }, 'view')));
  const sim = new Map();
  const agentStats = {};
  const faultCounts = {};
  for (const view of views) {
    for (const [hostId, containers] of Object.entries(view.hosts)) sim.set(hostId, containers);
    for (const [key, value] of Object.entries(view.stats)) {
      if (Array.isArray(value)) agentStats[key] = [...(agentStats[key] ?? []), ...value];
      else if (typeof value === 'object')
        agentStats[key] = Object.fromEntries(
          Object.entries(value).map(([k, v]) => [k, (agentStats[key]?.[k] ?? 0) + v]),
        );
      else agentStats[key] = (agentStats[key] ?? 0) + value;
    }
    for (const [key, value] of Object.entries(view.faults))
      faultCounts[key] = (faultCounts[key] ?? 0) + value;
  }
  const { rows: shards } = await stats.query(
    `SELECT id, host_id, state::text FROM shard WHERE state::text <> 'DELETED'`,
  );
  const problems = [];
  let checked = 0;
  // 1. One container per shard, on the shard's host only.
  const where = new Map();
  for (const [hostId, containers] of sim) {
    for (const c of containers) {
      checked++;
      if (where.has(c.shardId) && c.running)
        problems.push(`shard ${c.shardId} runs on ${where.get(c.shardId)} and ${hostId}`);
      if (c.running) where.set(c.shardId, hostId);
    }
  }
  // 2. Every shard the control plane holds RUNNING runs on its host; nothing runs that it does not want.
  const held = new Map(shards.map((s) => [s.id, s]));
  for (const s of shards) {
    if (lostHosts.has(s.host_id)) continue;
    checked++;
    if (s.state === 'RUNNING' && where.get(s.id) !== s.host_id)
      problems.push(`shard ${s.id} RUNNING on ${s.host_id} in the database, not running there`);
    if (s.state === 'PLACED' || s.state === 'STARTING')
      problems.push(`shard ${s.id} still ${s.state}`);
  }
  for (const [shardId, hostId] of where) {
    checked++;
    const s = held.get(shardId);
    if (s === undefined || s.host_id !== hostId || !['RUNNING', 'STOPPING'].includes(s.state)) {
      problems.push(
        `a container of shard ${shardId} runs on ${hostId}; the database has ${s ? `${s.state} on ${s.host_id}` : 'no such shard'}`,
      );
    }
  }
  // 3. reserved = the live reservations, on every GPU.
  const { rows: reserved } = await stats.query(
    `SELECT g.uuid, g.reserved_bytes::bigint AS reserved, coalesce(sum(sg.reserved_bytes), 0)::bigint AS live
       FROM gpu g LEFT JOIN shard_gpu sg ON sg.gpu_uuid = g.uuid AND sg.released_at IS NULL
      GROUP BY g.uuid, g.reserved_bytes HAVING g.reserved_bytes <> coalesce(sum(sg.reserved_bytes), 0)`,
  );
  checked += HOSTS * 8;
  for (const row of reserved)
    problems.push(`GPU ${row.uuid}: reserved ${row.reserved}, live reservations ${row.live}`);
  // 4. Live reservations only for shards that hold them.
  const { rows: stray } = await stats.query(
    `SELECT count(*)::int AS n FROM shard_gpu sg JOIN shard s ON s.id = sg.shard_id
      WHERE sg.released_at IS NULL AND s.state::text NOT IN ('PLACED','STARTING','RUNNING','STOPPING')`,
  );
  if (stray[0].n > 0) problems.push(`${stray[0].n} live reservations of shards that hold none`);
  // 5. Usage adds up: a GPU's used bytes = the sum its running shards report (simulator view).
  const simUsed = new Map();
  const { rows: gpuUsed } = await stats.query(
    `SELECT uuid, used_bytes::bigint AS used FROM gpu WHERE NOT (host_id = ANY($1))`,
    [[...lostHosts]],
  );
  let usageMismatches = 0;
  for (const [, containers] of sim) {
    for (const c of containers) {
      if (!c.running) continue;
      for (const gpu of c.gpus) simUsed.set(gpu.uuid, (simUsed.get(gpu.uuid) ?? 0) + 1);
    }
  }
  for (const row of gpuUsed) {
    checked++;
    // Used bytes are as of the last heartbeat; a GPU with no running shard must read 0 once
    // its host has heartbeated after the last exit, so only the zero case is exact.
    if (!simUsed.has(row.uuid) && Number(row.used) !== 0) usageMismatches++;
  }
  results.agents = {
    registers: agentStats.registers,
    connectRetries: agentStats.connectRetries,
    'register p99': ms(quantile(agentStats.registerMs ?? [], 0.99)),
    heartbeats: agentStats.heartbeats,
    reconciles: agentStats.reconciles,
    'reconcile p50': ms(quantile(agentStats.reconcileMs ?? [], 0.5)),
    'reconcile p99': ms(quantile(agentStats.reconcileMs ?? [], 0.99)),
    commands: agentStats.commands,
    repeatedCommands: agentStats.repeatedCommands,
    launchesOfRunning: agentStats.launchesOfRunning,
    reconcileLaunches: agentStats.reconcileLaunches,
    reconcileRemovals: agentStats.reconcileRemovals,
    exits: agentStats.exits,
    stateEvents: agentStats.stateEvents,
    unansweredRequests: agentStats.unanswered,
    registerRetries: agentStats.registerRetries,
    'failed in the control planes since they (re)started': await failedAgentMessages(),
  };
  results.faults = faultCounts;
  const byState = {};
  for (const s of shards) byState[s.state] = (byState[s.state] ?? 0) + 1;
  results.controlPlaneView = byState;
  results.check = {
    checked,
    problems: problems.length,
    usageMismatches,
    firstProblems: problems.slice(0, 10),
  };
  log('check', results.check);
}

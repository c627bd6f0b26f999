// How long a host's 1,000 shards take to settle after its agent restarts (issue 18: within 5 s).
//
// A control plane in this process on PostgreSQL or PGlite, one host of 8 simulated GPUs, 1,000
// shards created through GraphQL. Then the state a crash leaves: the control plane's events
// were lost, so it still has 400 shards PLACED whose containers run, 300 STARTING whose
// containers were created and never started (the kill between docker create and docker
// start), and 300 STOPPING whose containers exited. The restarted agent is simulated against
// the real AgentReportsService and the agent's own planReconcile: register (the reply says
// what should run), the plan (which launches the 300 created ones afresh; their STARTING and
// RUNNING events go through the agent link's handler as the agent's would, 16 shards at a
// time), then the immediate reconcile with every
// container's Docker status. Settled: no shard of the host left PLACED, STARTING or STOPPING.
// Docker's own time to create and start containers is not in it.
//
// Build first (npx nx run-many -t build), then:
//   node bench/lifecycle/restart-settle.mjs [--db postgres,pglite] [--shards 1000] [--rounds 3]
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { benchOptions } from '../options.mjs';

const options = benchOptions(import.meta.url, {
  options: {
    db: {
      type: 'string',
      default: 'postgres,pglite',
      choices: ['postgres', 'pglite'],
      list: true,
      help: 'the databases, one run each',
    },
    shards: { type: 'string', default: '1000', value: 'count', help: "the host's shards" },
    rounds: { type: 'string', default: '3', value: 'count', help: 'rounds per database' },
  },
  example: 'flock /tmp/bench.lock node bench/lifecycle/restart-settle.mjs --db postgres --rounds 1',
});
const SHARDS = Number(options.shards);
const ROUNDS = Number(options.rounds);
const GiB = 2 ** 30;
const dist = resolve('apps/control-plane/dist');
const { startPostgres, createTestDatabase } = await import(`${dist}/testing/index.js`);
const { createControlPlane } = await import(`${dist}/control-plane.js`);
const { AgentReportsService } = await import(`${dist}/fleet/agent-reports.service.js`);
const { AgentMessagesService } = await import(`${dist}/agent-link/agent-messages.service.js`);
const { FenceService } = await import(`${dist}/fence/fence.service.js`);
const { CapPolicies } = await import(`${dist}/fence/cap-policies.js`);
const { RemovedHosts } = await import(`${dist}/fleet/removed-hosts.js`);
const { ElasticService } = await import(`${dist}/elastic/elastic.service.js`);
const { LOGGER } = await import(`${dist}/logging/logger.js`);
const { Registry } = await import('prom-client');
const { agentSubjects } = await import('@gpushards/protocol');
const { PrismaService } = await import(`${dist}/database/index.js`);
const { FakeShardCommands } = await import(`${dist}/testing/fake-shard-commands.js`);
const { planReconcile } = await import(resolve('apps/agent/dist/reconcile/plan.js'));

async function graphql(url, query, variables, token, retried = false) {
  let response;
  try {
    response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query, variables }),
    });
  } catch (error) {
    // A kept-alive socket the server closed while the bench worked without HTTP: once more.
    if (retried) throw error;
    return graphql(url, query, variables, token, true);
  }
  const body = await response.json();
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}

async function inBatches(items, size, run) {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(run));
}

function registerRequest(hostId, runningShards) {
  return {
    protocolVersion: 1,
    hostId,
    host: {
      hostId,
      name: hostId,
      labels: {},
      agentVersion: 'bench',
      driverVersion: '550.54',
      cudaVersion: '12.4',
      simulated: true,
      contextOverheadBytes: 0,
    },
    gpus: Array.from({ length: 8 }, (_, index) => ({
      uuid: `GPU-${hostId}-${index}`,
      index,
      model: 'NVIDIA H100 80GB HBM3',
      totalBytes: 80 * GiB,
      usedBytes: 0,
    })),
    runningShards,
  };
}

async function round(kind, server, n) {
  const dataDir = await mkdtemp(join(os.tmpdir(), 'gpushards-bench-'));
  // PGlite: the control plane opens (and migrates) its own folder, as the one-box does.
  const database =
    kind === 'postgres'
      ? await createTestDatabase(kind, { server })
      : { config: { embeddedDataDir: join(dataDir, 'database') }, cleanup: async () => {} };
  const silent = new Writable({ write: (_c, _e, done) => done() });
  const cp = await createControlPlane({
    dataDir,
    database: database.config,
    hostOfflineSeconds: 86_400,
    port: 0,
    logLevel: 'silent',
    operatorOutput: silent,
    // Commands recorded, not delivered: the restarted agent is simulated below.
    shardCommands: new FakeShardCommands(),
    // 1,000 creates from one token in a second or two: the API rate limits are not measured here.
    security: { enforceLimits: false },
  });
  try {
    const fleet = cp.app.get(AgentReportsService);
    const prisma = cp.app.get(PrismaService);
    // The agent link's handler, as a control plane with agents has it (this one has none).
    const messages = new AgentMessagesService(
      fleet,
      cp.app.get(FenceService),
      cp.app.get(CapPolicies),
      cp.app.get(RemovedHosts),
      cp.app.get(ElasticService),
      new Registry(),
      cp.app.get(LOGGER),
    );
    const hostId = `restart-${n}`;
    await fleet.registerHost(registerRequest(hostId, []));
    const admin = (await readFile(join(dataDir, 'admin-token'), 'utf8')).trim();
    const { createTeam } = await graphql(
      cp.graphqlUrl,
      `
        mutation {
          createTeam(name: "t") {
            id
          }
        }
      `,
      {},
      admin,
    );
    await graphql(
      cp.graphqlUrl,
      `
        mutation ($t: ID!) {
          setQuotaPolicy(
            teamId: $t
            input: { maxTotal: "100t", maxShards: 100000, maxPerShard: "1t" }
          ) {
            id
          }
        }
      `,
      { t: createTeam.id },
      admin,
    );
    const member = (
      await graphql(
        cp.graphqlUrl,
        `
          mutation ($t: ID!) {
            createApiToken(teamId: $t, role: MEMBER, name: "b") {
              secret
            }
          }
        `,
        { t: createTeam.id },
        admin,
      )
    ).createApiToken.secret;
    const ids = [];
    await inBatches(Array.from({ length: SHARDS }), 16, async () => {
      const { createShard } = await graphql(
        cp.graphqlUrl,
        `
          mutation {
            createShard(input: { name: "s", image: "busybox", memoryPerGpu: "256m" }) {
              id
            }
          }
        `,
        {},
        member,
      );
      ids.push(createShard.id);
    });
    ids.sort();
    const placed = ids.slice(0, Math.round(SHARDS * 0.4));
    const created = ids.slice(placed.length, placed.length + Math.round(SHARDS * 0.3));
    const stopping = ids.slice(placed.length + created.length);
    const at = () => new Date().toISOString();
    const event = (shardId, state, extra = {}) => ({
      protocolVersion: 1,
      hostId,
      eventId: randomUUID(),
      shardId,
      state,
      at: at(),
      ...extra,
    });
    await inBatches(created, 16, (id) => fleet.applyShardStateEvent(hostId, event(id, 'STARTING')));
    await inBatches(stopping, 16, (id) =>
      graphql(
        cp.graphqlUrl,
        `
          mutation ($id: ID!) {
            stopShard(id: $id) {
              id
            }
          }
        `,
        { id },
        member,
      ),
    );
    const container = (id) => `c-${id.replaceAll('-', '')}`;

    // The agent starts again: it adopted every container in its sweep.
    const started = performance.now();
    const cpuBefore = process.cpuUsage();
    const reply = await fleet.registerHost(
      registerRequest(
        hostId,
        placed.map((id) => ({ shardId: id, containerId: container(id), state: 'RUNNING' })),
      ),
    );
    const known = [
      ...placed.map((shardId) => ({ shardId, state: 'RUNNING', observed: 'running' })),
      ...created.map((shardId) => ({ shardId, state: 'EXITED', observed: 'created' })),
      ...stopping.map((shardId) => ({ shardId, state: 'EXITED', observed: 'exited' })),
    ];
    const registeredMs = performance.now() - started;
    const plan = planReconcile(known, reply, new Set());
    if (plan.launch.length !== created.length) {
      throw new Error(`planned ${plan.launch.length} launches, expected ${created.length}`);
    }
    const observedAt = at();
    // As the agent link delivers them: encoded, on the host's state subject.
    const send = (message) =>
      messages.handle({ subject: agentSubjects(hostId).state, data: JSON.stringify(message) });
    await inBatches(plan.launch, 16, async (spec) => {
      await send(event(spec.shardId, 'STARTING'));
      await send(event(spec.shardId, 'RUNNING', { containerId: `n-${container(spec.shardId)}` }));
    });
    const launchedMs = performance.now() - started;
    await fleet.reconcile(hostId, {
      protocolVersion: 1,
      hostId,
      observedAt,
      containers: [
        ...placed.map((id) => ({
          shardId: id,
          containerId: container(id),
          running: true,
          status: 'running',
        })),
        ...created.map((id) => ({
          shardId: id,
          containerId: `n-${container(id)}`,
          running: true,
          status: 'running',
        })),
        ...stopping.map((id) => ({
          shardId: id,
          containerId: container(id),
          running: false,
          status: 'exited',
          exitCode: 143,
        })),
      ],
    });
    const settledMs = performance.now() - started;
    const cpu = process.cpuUsage(cpuBefore);
    const cpuMs = (cpu.user + cpu.system) / 1000;
    const left = await prisma.shard.count({
      where: { hostId, state: { in: ['PLACED', 'STARTING', 'STOPPING'] } },
    });
    const byState = await prisma.shard.groupBy({ by: ['state'], where: { hostId }, _count: true });
    return {
      settledMs,
      cpuMs,
      registeredMs,
      launchedMs,
      left,
      byState: Object.fromEntries(byState.map((r) => [r.state, r._count])),
    };
  } finally {
    await cp.close();
    await database.cleanup();
    await rm(dataDir, { recursive: true, force: true });
  }
}

const server = options.db.includes('postgres') ? await startPostgres() : undefined;
try {
  for (const kind of options.db.split(',')) {
    const times = [];
    for (let n = 0; n < ROUNDS; n++) {
      const result = await round(kind, kind === 'postgres' ? server : undefined, n);
      if (result.left !== 0)
        throw new Error(`${result.left} shards not settled: ${JSON.stringify(result.byState)}`);
      times.push(result.settledMs);
      console.log(
        `${kind} round ${n + 1}: settled in ${result.settledMs.toFixed(0)} ms, ` +
          `control plane CPU ${result.cpuMs.toFixed(0)} ms ` +
          `(registered ${result.registeredMs.toFixed(0)}, relaunches reported ${result.launchedMs.toFixed(0)}) ` +
          JSON.stringify(result.byState),
      );
    }
    times.sort((a, b) => a - b);
    console.log(
      `${kind}: ${SHARDS} shards, median ${times[Math.floor(times.length / 2)].toFixed(0)} ms, max ${times.at(-1).toFixed(0)} ms`,
    );
  }
} finally {
  await server?.stop();
}

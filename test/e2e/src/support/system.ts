import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import {
  startPostgres,
  type PostgresServer,
} from '../../../../apps/control-plane/dist/testing/index.js';
import pg from 'pg';

import { removeRunContainers } from './docker.js';
import { graphql, graphqlResponse, HOST_FIELDS, type HostView } from './graphql.js';
import { importProbeImage, nativeBuild, REPO_ROOT, type NativeBuild } from './native.js';
import { freePort, ManagedProcess, sleep, waitFor } from './processes.js';

export const MiB = 1024 ** 2;
export const GiB = 1024 ** 3;

/** One simulated GPU host of the fleet. */
export interface HostSpec {
  /** Short name in the suite ("a"); the host id is `<run>-<key>`. */
  readonly key: string;
  /** GPUSHARDS_SIMULATE_GPUS */
  readonly gpus: string;
  readonly labels: string;
  /**
   * P of an MPS partition (GPUSHARDS_MPS_ISOLATED_PERCENT): the agent gets a pipe folder whose
   * `control` socket stands in for NVIDIA's MPS control daemon (the fake driver makes every
   * shard process an MPS client when it is there). Every shard of the host is then an MPS
   * client: an isolated one at its share, every other at 100 − P.
   */
  readonly mpsIsolatedPercent?: number;
}

export const FLEET: readonly HostSpec[] = [
  {
    key: 'a',
    gpus: '2xNVIDIA H100 80GB HBM3:80g',
    labels: 'zone=dc1,tier=h100',
    mpsIsolatedPercent: 40,
  },
  { key: 'b', gpus: '4xNVIDIA L4:24g', labels: 'zone=dc1,tier=l4' },
  { key: 'c', gpus: '1xNVIDIA A100-SXM4-40GB:40g', labels: 'zone=dc2,tier=a100' },
];

/** Heartbeats every second and a reconcile every 4 s, so faults converge within the suite. */
const AGENT_HEARTBEAT_SECONDS = 1;
const AGENT_RECONCILE_SECONDS = 4;
/** Long enough for a kill -9 and restart of an agent on a loaded 2-core box; short enough to wait out. */
export const HOST_OFFLINE_SECONDS = 12;

export interface ControlPlaneProcess {
  readonly name: string;
  readonly process: ManagedProcess;
  readonly url: string;
  readonly graphqlUrl: string;
}

export interface AgentProcess {
  readonly spec: HostSpec;
  readonly hostId: string;
  readonly process: ManagedProcess;
  readonly stateDir: string;
}

/**
 * The whole system as processes: a cluster of three nats-servers (deploy/nats --cluster) with
 * deploy/nats's per-agent nkey users on each, every client given all three, one
 * PostgreSQL, two control planes (apps/control-plane/dist/main.js) on it, one agent per host
 * (apps/agent/dist/main.js) with simulated GPUs through native/'s fake driver, the real
 * libvgpu.so and the Docker engine. Only GraphQL, Docker, SQL and the processes' logs are
 * used to look at it.
 */
export class System {
  /** Unique per run: prefixes host ids (and so Docker labels and container names). */
  readonly runId = `e2e${process.pid.toString(36)}${randomBytes(2).toString('hex')}`;
  readonly workDir = mkdtempSync(join(tmpdir(), `gpushards-e2e-${this.runId}-`));
  readonly image = `gpushards-e2e/probe:${this.runId}`;
  readonly startedAt = Date.now();
  readonly controlPlanes: ControlPlaneProcess[] = [];
  readonly agents = new Map<string, AgentProcess>();
  adminToken = '';
  /** The cluster's servers; clients get all three (GPUSHARDS_NATS_URL) and pick one. */
  readonly natsServers: { name: string; port: number; process: ManagedProcess }[] = [];
  postgres: PostgresServer | undefined;
  databaseUrl = '';
  sql: pg.Pool | undefined;
  private native: NativeBuild | undefined;
  private credentials = new Map<string, Record<string, string>>();
  /** The stand-in MPS control daemons by host key: they live as long as the run. */
  private readonly mpsDaemons = new Map<string, Server>();

  hostId(key: string): string {
    return `${this.runId}-${key}`;
  }

  get hostIds(): string[] {
    return FLEET.map((spec) => this.hostId(spec.key));
  }

  agent(key: string): AgentProcess {
    const agent = this.agents.get(key);
    if (agent === undefined) throw new Error(`no agent ${key}`);
    return agent;
  }

  /** The MPS pipe folder of host `key` (GPUSHARDS_MPS_PIPE_DIR), whether or not it has one. */
  mpsPipeDir(key: string): string {
    return join(this.workDir, `mps-${key}`);
  }

  log(name: string): string {
    return join(this.workDir, 'logs', `${name}.log`);
  }

  /** Builds what is missing, then starts everything; resolves once every agent registered. */
  async start(): Promise<void> {
    mkdirSync(join(this.workDir, 'logs'));
    for (const dist of ['apps/control-plane/dist/main.js', 'apps/agent/dist/main.js']) {
      if (!existsSync(join(REPO_ROOT, dist))) {
        throw new Error(`${dist} is missing: build first (npx nx run-many -t build)`);
      }
    }
    this.native = nativeBuild();
    importProbeImage(this.image, this.native, `io.gpushards.e2e-run=${this.runId}`);
    await this.startNats();
    await this.startDatabase();
    await this.startControlPlane(1);
    this.adminToken = readFileSync(join(this.workDir, 'cp1', 'admin-token'), 'utf8').trim();
    await this.startControlPlane(2);
    await Promise.all(FLEET.map((spec) => this.startAgent(spec)));
  }

  // ---- NATS -------------------------------------------------------------------------------

  private async startNats(): Promise<void> {
    const dir = join(this.workDir, 'nats');
    const servers = [];
    for (const name of ['n1', 'n2', 'n3']) {
      servers.push({ name, port: await freePort(), routePort: await freePort() });
    }
    const cluster = servers.map((s) => `${s.name}=127.0.0.1:${s.port}:${s.routePort}`).join(',');
    execFileSync(
      process.execPath,
      [
        join(REPO_ROOT, 'deploy/nats/generate-config.mjs'),
        '--out',
        dir,
        '--cluster',
        cluster,
        ...this.hostIds,
      ],
      { stdio: 'ignore' },
    );
    const users = ['control-plane', ...this.hostIds.map((h) => `agent-${h}`)];
    for (const user of users) {
      const text = readFileSync(join(dir, 'credentials', `${user}.env`), 'utf8');
      const env = Object.fromEntries(
        text
          .trim()
          .split('\n')
          .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
      );
      this.credentials.set(user, env);
    }
    for (const server of servers) {
      const process_ = new ManagedProcess({
        name: `nats-server ${server.name}`,
        command: process.env.GPUSHARDS_NATS_SERVER ?? 'nats-server',
        // Loopback only: clients and routes.
        args: [
          '-c',
          join(dir, `nats-${server.name}.conf`),
          '-a',
          '127.0.0.1',
          '--cluster',
          `nats://127.0.0.1:${server.routePort}`,
        ],
        env: process.env,
        logFile: this.log(`nats-${server.name}`),
      });
      this.natsServers.push({ name: server.name, port: server.port, process: process_ });
    }
    await this.startNatsProcess();
  }

  /** Starts every server of the cluster that is not running; resolves once each is ready. */
  async startNatsProcess(): Promise<void> {
    await Promise.all(
      this.natsServers
        .filter((server) => !server.process.running)
        .map(async (server) => {
          server.process.start();
          await server.process.waitForLog(/Server is ready/, 15_000);
        }),
    );
  }

  /** Stops every server of the cluster (the whole bus down). */
  async stopNats(graceMs = 2_000): Promise<void> {
    await Promise.all(this.natsServers.map((server) => server.process.stop(graceMs)));
  }

  get natsUrl(): string {
    return this.natsServers.map((server) => `nats://127.0.0.1:${server.port}`).join(',');
  }

  // ---- PostgreSQL -------------------------------------------------------------------------

  private async startDatabase(): Promise<void> {
    this.postgres = await startPostgres();
    const admin = new pg.Client({ connectionString: this.postgres.url });
    await admin.connect();
    try {
      await admin.query('CREATE DATABASE gpushards');
    } finally {
      await admin.end();
    }
    this.databaseUrl = this.postgres.urlFor('gpushards');
    this.sql = new pg.Pool({ connectionString: this.databaseUrl, max: 2 });
    // A restarted server breaks idle clients: the pool drops them; nothing to do here.
    this.sql.on('error', () => {});
  }

  /** A query for invariant checks (read only). */
  async query<R extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<R[]> {
    return (await this.sql!.query<R>(text, values)).rows;
  }

  // ---- control planes ---------------------------------------------------------------------

  async startControlPlane(n: 1 | 2): Promise<ControlPlaneProcess> {
    const dataDir = join(this.workDir, `cp${n}`);
    mkdirSync(dataDir, { recursive: true });
    const port = await freePort();
    const natsEnv = this.credentials.get('control-plane')!;
    const process_ = new ManagedProcess({
      name: `control plane ${n}`,
      command: process.execPath,
      args: [join(REPO_ROOT, 'apps/control-plane/dist/main.js')],
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: this.databaseUrl,
        GPUSHARDS_DATABASE_POOL_SIZE: '10',
        GPUSHARDS_HOST: '127.0.0.1',
        GPUSHARDS_PORT: String(port),
        GPUSHARDS_DATA_DIR: dataDir,
        GPUSHARDS_HOST_OFFLINE_SECONDS: String(HOST_OFFLINE_SECONDS),
        GPUSHARDS_NATS_URL: this.natsUrl,
        GPUSHARDS_NATS_COMMAND_TIMEOUT_SECONDS: '3',
        GPUSHARDS_NATS_COMMAND_ATTEMPTS: '3',
        ...natsEnv,
      },
      logFile: this.log(`cp${n}`),
      cwd: dataDir,
    });
    const url = `http://127.0.0.1:${port}`;
    const cp = { name: `cp${n}`, process: process_, url, graphqlUrl: `${url}/graphql` };
    this.controlPlanes[n - 1] = cp;
    await this.restartControlPlane(n);
    return cp;
  }

  controlPlane(n: 1 | 2): ControlPlaneProcess {
    const cp = this.controlPlanes[n - 1];
    if (cp === undefined) throw new Error(`control plane ${n} was never started`);
    return cp;
  }

  /** Starts control plane `n` again (same port, data folder and log); resolves once ready. */
  async restartControlPlane(n: 1 | 2): Promise<void> {
    const cp = this.controlPlane(n);
    cp.process.start();
    await cp.process.waitForLog(/control plane listening/, 60_000);
    await this.waitReady(cp);
  }

  async waitReady(cp: ControlPlaneProcess, timeoutMs = 30_000): Promise<void> {
    await waitFor(
      `${cp.name} /readyz`,
      async () => {
        const response = await fetch(`${cp.url}/readyz`, { signal: AbortSignal.timeout(2_000) });
        return response.status === 200 ? true : undefined;
      },
      timeoutMs,
    );
  }

  /** GraphQL as admin on control plane `n` (default 1). */
  admin<T>(query: string, variables: Record<string, unknown> = {}, n: 1 | 2 = 1): Promise<T> {
    return graphql<T>(this.controlPlane(n).graphqlUrl, this.adminToken, query, variables);
  }

  /** GraphQL with a team token on control plane `n` (default 1). */
  as<T>(
    token: string,
    query: string,
    variables: Record<string, unknown> = {},
    n: 1 | 2 = 1,
  ): Promise<T> {
    return graphql<T>(this.controlPlane(n).graphqlUrl, token, query, variables);
  }

  rawAs<T>(token: string, query: string, variables: Record<string, unknown> = {}, n: 1 | 2 = 1) {
    return graphqlResponse<T>(this.controlPlane(n).graphqlUrl, token, query, variables);
  }

  async metrics(n: 1 | 2 = 1): Promise<string> {
    return (await fetch(`${this.controlPlane(n).url}/metrics`)).text();
  }

  async host(key: string, n: 1 | 2 = 1): Promise<HostView> {
    const { host } = await this.admin<{ host: HostView }>(
      `query ($id: ID!) { host(id: $id) { ${HOST_FIELDS} } }`,
      { id: this.hostId(key) },
      n,
    );
    return host;
  }

  // ---- agents -----------------------------------------------------------------------------

  private async startAgent(spec: HostSpec): Promise<void> {
    const hostId = this.hostId(spec.key);
    const stateDir = join(this.workDir, `agent-${spec.key}`);
    mkdirSync(stateDir, { recursive: true });
    const natsEnv = this.credentials.get(`agent-${hostId}`)!;
    if (spec.mpsIsolatedPercent !== undefined) await this.startMpsDaemon(spec.key);
    const agentProcess = new ManagedProcess({
      name: `agent ${spec.key} (${hostId})`,
      command: process.execPath,
      args: [join(REPO_ROOT, 'apps/agent/dist/main.js')],
      env: {
        PATH: process.env.PATH,
        ...(process.env.DOCKER_HOST ? { DOCKER_HOST: process.env.DOCKER_HOST } : {}),
        GPUSHARDS_HOST_ID: hostId,
        GPUSHARDS_HOST_NAME: `e2e box ${spec.key}`,
        GPUSHARDS_HOST_LABELS: spec.labels,
        GPUSHARDS_NATS_URL: this.natsUrl,
        GPUSHARDS_NATS_TIMEOUT_SECONDS: '5',
        GPUSHARDS_SIMULATE_GPUS: spec.gpus,
        GPUSHARDS_FAKE_LIBRARY_DIR: this.native!.fakeDriverDir,
        GPUSHARDS_INTERPOSER_PATH: this.native!.interposer,
        GPUSHARDS_STATE_DIR: stateDir,
        GPUSHARDS_HEARTBEAT_SECONDS: String(AGENT_HEARTBEAT_SECONDS),
        GPUSHARDS_RECONCILE_SECONDS: String(AGENT_RECONCILE_SECONDS),
        GPUSHARDS_STOP_GRACE_SECONDS: '2',
        ...(spec.mpsIsolatedPercent !== undefined
          ? {
              GPUSHARDS_MPS_PIPE_DIR: this.mpsPipeDir(spec.key),
              GPUSHARDS_MPS_ISOLATED_PERCENT: String(spec.mpsIsolatedPercent),
            }
          : {}),
        ...natsEnv,
      },
      logFile: this.log(`agent-${spec.key}`),
    });
    this.agents.set(spec.key, { spec, hostId, process: agentProcess, stateDir });
    await this.restartAgent(spec.key);
  }

  /**
   * The host's "MPS control daemon": a unix socket named `control` in its pipe folder, what the
   * agent checks for at start and the fake driver at each cuInit (in the shard, through the
   * read-only mount). It accepts and closes connections, and outlives agent restarts.
   */
  private async startMpsDaemon(key: string): Promise<void> {
    const pipeDir = this.mpsPipeDir(key);
    mkdirSync(pipeDir, { recursive: true });
    const daemon = createServer((socket) => {
      socket.on('error', () => {});
      socket.end();
    });
    await new Promise<void>((resolve, reject) => {
      daemon.once('error', reject);
      daemon.listen(join(pipeDir, 'control'), resolve);
    });
    chmodSync(join(pipeDir, 'control'), 0o777);
    this.mpsDaemons.set(key, daemon);
  }

  /** Starts the agent of `key` again; resolves once it registered and started its timers. */
  async restartAgent(key: string): Promise<void> {
    const agent = this.agent(key);
    agent.process.start();
    await agent.process.waitForLog(/"msg":"agent started"/, 60_000);
  }

  /** Whether kill/restart left PostgreSQL down (set by the suite around its own calls). */
  postgresDown = false;

  async killPostgres(): Promise<void> {
    this.postgresDown = true;
    await this.postgres!.kill();
  }

  async restartPostgres(): Promise<void> {
    await this.postgres!.restart();
    this.postgresDown = false;
  }

  /**
   * After a fault check, whatever it left down is started again, so that one failure does not
   * take every later check with it.
   */
  async ensureUp(): Promise<void> {
    if (this.postgresDown) await this.restartPostgres();
    if (this.natsServers.some((server) => !server.process.running)) await this.startNatsProcess();
    for (const n of [1, 2] as const) {
      if (!this.controlPlane(n).process.running) await this.restartControlPlane(n);
    }
    for (const [key, agent] of this.agents) {
      if (!agent.process.running) await this.restartAgent(key);
    }
  }

  // ---- the end ----------------------------------------------------------------------------

  /** Stops everything this run started and removes its containers, image and folders. */
  async close({ keepWorkDir = false } = {}): Promise<void> {
    const errors: unknown[] = [];
    const attempt = async (step: () => Promise<void> | void) => {
      try {
        await step();
      } catch (error) {
        errors.push(error);
      }
    };
    for (const agent of this.agents.values()) await attempt(() => agent.process.stop(3_000));
    for (const cp of this.controlPlanes) await attempt(() => cp.process.stop(5_000));
    for (const server of this.natsServers) await attempt(() => server.process.stop(2_000));
    await attempt(() => this.sql?.end());
    await attempt(() => this.postgres?.stop());
    await attempt(() => removeRunContainers(this.hostIds, this.image));
    for (const daemon of this.mpsDaemons.values()) {
      await attempt(() => new Promise<void>((resolve) => daemon.close(() => resolve())));
    }
    if (!keepWorkDir) {
      // The agents' state folders hold region folders that containers (root) wrote into.
      await attempt(() => rmSync(this.workDir, { recursive: true, force: true }));
    }
    if (errors.length > 0) {
      throw new AggregateError(errors, `cleanup failed in ${errors.length} step(s)`);
    }
  }
}

export { sleep };

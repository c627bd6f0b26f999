import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';

import { createAgent, parseSimulatedGpus, type Agent, type AgentOptions } from '@gpushards/agent';
import { cleanUpDocker, importCudaProbeImage } from '../../../../apps/agent/dist/testing/docker.js';
import { fakeLibraries, nativeArtifacts } from '../../../../apps/agent/dist/testing/native.js';
import {
  ADMIN_TOKEN_FILE,
  createControlPlane,
  type AgentLinkOptions,
  type ControlPlane,
} from '@gpushards/control-plane';
import {
  createTestDatabase,
  startPostgres,
  type PostgresServer,
  type TestDatabase,
  type TestDatabaseKind,
} from '../../../../apps/control-plane/dist/testing/index.js';
import pg from 'pg';
import { pino } from 'pino';

export const MiB = 1024 ** 2;
export const GiB = 1024 ** 3;

/** GPUSHARDS_TEST_LOG=debug shows both sides' logs on stderr. */
const LOG_LEVEL = (process.env.GPUSHARDS_TEST_LOG as 'debug' | undefined) ?? 'silent';

export interface GraphqlResponse<T> {
  readonly data?: T | null;
  readonly errors?: readonly { message: string; extensions?: { code?: string } }[];
}

/**
 * A control plane on a real PostgreSQL database (or an embedded PGlite one), and the agents of simulated hosts (the fake
 * NVIDIA libraries, the real libvgpu.so, the Docker engine), linked as the caller says.
 * Everything it starts is stopped, and every container and image removed, by close().
 */
export class Stack {
  controlPlane: ControlPlane | undefined;
  private readonly replicas: ControlPlane[] = [];
  private readonly agents = new Map<string, Agent>();
  private readonly stateDirs = new Map<string, string>();
  private adminToken = '';
  private readonly dataDir = mkdtempSync(join(tmpdir(), 'gpushards-it-cp-'));
  /** Straight SQL, on PostgreSQL only (PGlite's folder is the control plane's alone). */
  private readonly sql: pg.Pool | undefined;

  private constructor(
    private readonly postgres: PostgresServer | undefined,
    private readonly database: TestDatabase,
    readonly probeImage: string,
  ) {
    const url = database.config.url;
    this.sql = url === undefined ? undefined : new pg.Pool({ connectionString: url, max: 1 });
  }

  /**
   * A migrated database (PostgreSQL by default, or a PGlite folder), the CUDA probe image
   * (see apps/agent's testing) unless `withProbeImage` is false (no agent runs shards).
   */
  static async start(
    name: string,
    kind: TestDatabaseKind = 'postgres',
    withProbeImage = true,
  ): Promise<Stack> {
    const probeImage = withProbeImage ? `gpushards-it/cuda-probe:${name}-${process.pid}` : '';
    if (withProbeImage)
      importCudaProbeImage(probeImage, fakeLibraries().cuda, nativeArtifacts().interposer);
    const postgres = kind === 'postgres' ? await startPostgres() : undefined;
    const database = await createTestDatabase(kind, postgres ? { server: postgres } : {});
    await database.prisma.close();
    return new Stack(postgres, database, probeImage);
  }

  /** Starts (or, after stopControlPlane, starts again) the control plane on the same database. */
  async startControlPlane(link: AgentLinkOptions): Promise<ControlPlane> {
    this.controlPlane = await createControlPlane({
      dataDir: this.dataDir,
      database: this.database.config,
      port: 0,
      logLevel: LOG_LEVEL,
      logDestination: pino.destination(2),
      operatorOutput: new Writable({ write: (_chunk, _encoding, done) => done() }),
      link,
    });
    this.adminToken = readFileSync(join(this.dataDir, ADMIN_TOKEN_FILE), 'utf8').trim();
    return this.controlPlane;
  }

  /** A second control plane on the same database (a replica); closed by close(). */
  async startReplica(link: AgentLinkOptions): Promise<ControlPlane> {
    const replica = await createControlPlane({
      dataDir: this.dataDir,
      database: this.database.config,
      port: 0,
      logLevel: LOG_LEVEL,
      logDestination: pino.destination(2),
      operatorOutput: new Writable({ write: (_chunk, _encoding, done) => done() }),
      link,
    });
    this.replicas.push(replica);
    return replica;
  }

  async stopControlPlane(): Promise<void> {
    await this.controlPlane?.close();
    this.controlPlane = undefined;
  }

  /** Starts the agent of `hostId` (2 simulated 24 GiB GPUs through the fakes); resolves once registered. */
  async startAgent(hostId: string, link: AgentOptions['link']): Promise<Agent> {
    let stateDir = this.stateDirs.get(hostId);
    if (stateDir === undefined) {
      stateDir = mkdtempSync(join(tmpdir(), `gpushards-it-${hostId}-`));
      this.stateDirs.set(hostId, stateDir);
    }
    const agent = await createAgent({
      hostId,
      hostName: `box ${hostId}`,
      link,
      gpus: {
        kind: 'simulated',
        gpus: parseSimulatedGpus('2xTest GPU:24g'),
        fakeLibraryDir: fakeLibraries().dir,
      },
      interposerPath: nativeArtifacts().interposer,
      stateDir,
      heartbeatSeconds: 1,
      reconcileSeconds: 3600,
      stopGraceSeconds: 1,
      logLevel: LOG_LEVEL,
      logDestination: pino.destination(2),
    });
    this.agents.set(hostId, agent);
    return agent;
  }

  /** The folder the agent of `hostId` keeps the shard's region in. */
  regionDir(hostId: string, shardId: string): string {
    return join(this.stateDirs.get(hostId) ?? '/nonexistent', 'regions', shardId);
  }

  async stopAgent(hostId: string): Promise<void> {
    await this.agents.get(hostId)?.stop();
    this.agents.delete(hostId);
  }

  async graphql<T>(query: string, variables: Record<string, unknown> = {}): Promise<T> {
    const response = await this.graphqlResponse<T>(query, variables);
    assert.equal(response.errors, undefined, JSON.stringify(response.errors));
    return response.data!;
  }

  async graphqlResponse<T>(
    query: string,
    variables: Record<string, unknown> = {},
  ): Promise<GraphqlResponse<T>> {
    const controlPlane = this.controlPlane;
    if (controlPlane === undefined) throw new Error('the control plane is not running');
    const response = await fetch(controlPlane.graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${this.adminToken}` },
      body: JSON.stringify({ query, variables }),
    });
    return (await response.json()) as GraphqlResponse<T>;
  }

  /** A control plane's Prometheus text (default: the main one). */
  async metrics(controlPlane: ControlPlane | undefined = this.controlPlane): Promise<string> {
    return (await fetch(`${controlPlane!.url}/metrics`)).text();
  }

  /** A team with a generous quota; returns its id. */
  async createTeam(name: string): Promise<string> {
    const { createTeam } = await this.graphql<{ createTeam: { id: string } }>(
      `mutation ($name: String!) { createTeam(name: $name) { id } }`,
      { name },
    );
    await this.graphql(
      `mutation ($teamId: ID!) {
        setQuotaPolicy(teamId: $teamId, input: {maxTotal: "1t", maxShards: 100, maxPerShard: "1t"}) { id }
      }`,
      { teamId: createTeam.id },
    );
    return createTeam.id;
  }

  /** One row count straight from the database (what GraphQL does not show, like usage samples). */
  async count(sql: string, values: unknown[]): Promise<number> {
    const result = await this.pool().query<{ n: string }>(sql, values);
    return Number(result.rows[0]?.n ?? 0);
  }

  /** One statement straight on the database: what a crash leaves that no API call can. */
  async execute(sql: string, values: unknown[]): Promise<void> {
    await this.pool().query(sql, values);
  }

  private pool(): pg.Pool {
    if (this.sql === undefined) throw new Error('straight SQL is for PostgreSQL stacks only');
    return this.sql;
  }

  async close(hostIds: readonly string[]): Promise<void> {
    for (const hostId of [...this.agents.keys()]) await this.stopAgent(hostId);
    await this.stopControlPlane();
    for (const replica of this.replicas) await replica.close();
    await this.sql?.end();
    await this.database.cleanup();
    await this.postgres?.stop();
    cleanUpDocker(hostIds, this.probeImage === '' ? [] : [this.probeImage]);
    for (const dir of [this.dataDir, ...this.stateDirs.values()]) {
      rmSync(dir, { recursive: true, force: true });
    }
  }
}

export const SHARD = `query ($id: ID!) {
  shard(id: $id) {
    id state hostId containerId failureReason limitPerGpu { bytes }
    gpus { gpuUuid used { bytes } releasedAt }
  }
}`;

export interface ShardView {
  id: string;
  state: string;
  hostId: string | null;
  containerId: string | null;
  failureReason: string | null;
  limitPerGpu: { bytes: string };
  gpus: { gpuUuid: string; used: { bytes: string }; releasedAt: string | null }[];
}

export const CREATE_SHARD = `mutation ($input: CreateShardInput!) {
  createShard(input: $input) { id state hostId }
}`;

/** Polls `probe` until it returns something other than undefined. */
export async function waitFor<T>(
  what: string,
  probe: () => T | undefined | Promise<T | undefined>,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`, { cause: last });
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import {
  PROTOCOL_VERSION,
  type Heartbeat,
  type RegisterRequest,
  type ShardStateEvent,
} from '@gpushards/protocol';
import type { ApiTestHarness, GraphqlResponse } from './api-test-harness.js';

/** Builders of agent messages and GraphQL setup shared by the fleet and shards tests. */

export const GiB = 2 ** 30;
export const MiB = 2 ** 20;

export interface TestHostOptions {
  readonly gpus?: number;
  readonly gpuBytes?: number;
  readonly model?: string;
  readonly labels?: Record<string, string>;
  readonly overheadBytes?: number;
  readonly runningShards?: RegisterRequest['runningShards'];
}

export function gpuUuidOf(hostId: string, index: number): string {
  return `GPU-${hostId}-${index}`;
}

export function registerRequest(hostId: string, options: TestHostOptions = {}): RegisterRequest {
  const count = options.gpus ?? 2;
  return {
    protocolVersion: PROTOCOL_VERSION,
    hostId,
    host: {
      hostId,
      name: `box-${hostId}`,
      labels: options.labels ?? {},
      agentVersion: '0.1.0',
      driverVersion: '550.54',
      cudaVersion: '12.4',
      simulated: true,
      contextOverheadBytes: options.overheadBytes ?? 512 * MiB,
    },
    gpus: Array.from({ length: count }, (_, index) => ({
      uuid: gpuUuidOf(hostId, index),
      index,
      model: options.model ?? 'NVIDIA H100 80GB HBM3',
      totalBytes: options.gpuBytes ?? 80 * GiB,
      usedBytes: 0,
    })),
    runningShards: options.runningShards ?? [],
  };
}

export function heartbeat(
  hostId: string,
  sentAt: Date,
  shards: Heartbeat['shards'] = [],
  gpus: Heartbeat['gpus'] = [],
): Heartbeat {
  return {
    protocolVersion: PROTOCOL_VERSION,
    hostId,
    sentAt: sentAt.toISOString(),
    sequence: 0,
    gpus,
    shards,
  };
}

export function stateEvent(
  hostId: string,
  shardId: string,
  state: ShardStateEvent['state'],
  at: Date,
  extra: Partial<ShardStateEvent> = {},
): ShardStateEvent {
  return {
    protocolVersion: PROTOCOL_VERSION,
    hostId,
    eventId: randomUUID(),
    shardId,
    state,
    at: at.toISOString(),
    ...extra,
  };
}

export function errorCode(response: GraphqlResponse): string | undefined {
  return response.errors?.[0]?.extensions?.code;
}

export function assertError(response: GraphqlResponse, code: string, context = ''): void {
  assert.equal(errorCode(response), code, `${context} ${JSON.stringify(response).slice(0, 2000)}`);
}

export function assertOk<T>(response: GraphqlResponse<T>, context = ''): T {
  assert.equal(response.errors, undefined, `${context} ${JSON.stringify(response.errors)}`);
  return response.data!;
}

export interface TestTeam {
  readonly id: string;
  readonly member: string;
  readonly viewer: string;
}

export interface TestQuota {
  readonly maxTotal?: string;
  readonly maxShards?: number;
  readonly maxPerShard?: string;
  readonly maxGpusPerShard?: number;
  readonly allowedGpuModels?: string[];
}

/** A team with a quota policy (generous unless told), a MEMBER and a VIEWER token. */
export async function createTestTeam(
  h: ApiTestHarness,
  name: string,
  quota: TestQuota | null = {},
): Promise<TestTeam> {
  const created = assertOk(
    await h.graphql<{ createTeam: { id: string } }>(
      `mutation ($name: String!) { createTeam(name: $name) { id } }`,
      { name },
    ),
  );
  const id = created.createTeam.id;
  if (quota !== null) {
    assertOk(
      await h.graphql(
        `mutation ($teamId: ID!, $input: QuotaPolicyInput!) { setQuotaPolicy(teamId: $teamId, input: $input) { id } }`,
        {
          teamId: id,
          input: {
            maxTotal: quota.maxTotal ?? '10t',
            maxShards: quota.maxShards ?? 10_000,
            maxPerShard: quota.maxPerShard ?? '1t',
            ...(quota.maxGpusPerShard === undefined
              ? {}
              : { maxGpusPerShard: quota.maxGpusPerShard }),
            ...(quota.allowedGpuModels === undefined
              ? {}
              : { allowedGpuModels: quota.allowedGpuModels }),
          },
        },
      ),
    );
  }
  const token = async (role: string) =>
    assertOk(
      await h.graphql<{ createApiToken: { secret: string } }>(
        `mutation ($teamId: ID, $role: Role!, $name: String!) { createApiToken(teamId: $teamId, role: $role, name: $name) { secret } }`,
        { teamId: id, role, name: `${role.toLowerCase()} token` },
      ),
    ).createApiToken.secret;
  return { id, member: await token('MEMBER'), viewer: await token('VIEWER') };
}

export const SHARD_FIELDS = `id teamId name image command env { name value } state hostId gpuCount
  memoryPerGpu { bytes human } limitPerGpu { bytes human } totalMemory { bytes }
  gpuModelInclude gpuModelExclude hostSelector { key value } placementPolicy
  failureReason exitCode idempotencyKey version createdAt stoppedAt
  gpus { gpuUuid index model reserved { bytes } used { bytes } releasedAt }`;

export const CREATE_SHARD = `mutation ($input: CreateShardInput!) { createShard(input: $input) { ${SHARD_FIELDS} } }`;
export const SET_SHARD_COMPUTE = `mutation ($id: ID!, $share: Int, $mode: ComputeMode) {
  setShardCompute(id: $id, computeSharePercent: $share, computeMode: $mode) {
    id computeSharePercent computeMode
  }
}`;

export interface ShardResult {
  id: string;
  teamId: string;
  name: string;
  state: string;
  hostId: string | null;
  gpuCount: number;
  memoryPerGpu: { bytes: string; human: string };
  limitPerGpu: { bytes: string; human: string };
  idempotencyKey: string | null;
  version: number;
  env: { name: string; value: string }[];
  gpus: {
    gpuUuid: string;
    index: number;
    reserved: { bytes: string };
    releasedAt: string | null;
  }[];
}

/**
 * createShard through GraphQL. queue: false unless the input says otherwise: these tests are
 * about immediate placement (a request that fits nowhere is NO_CAPACITY); queue tests pass
 * queue: true.
 */
export async function createShard(
  h: ApiTestHarness,
  token: string,
  input: Record<string, unknown>,
): Promise<GraphqlResponse<{ createShard: ShardResult }>> {
  return h.graphql<{ createShard: ShardResult }>(
    CREATE_SHARD,
    {
      input: {
        image: 'ghcr.io/org/trainer:1.2',
        name: 'train',
        memoryPerGpu: '8g',
        queue: false,
        ...input,
      },
    },
    token,
  );
}

/** Counts of every row a shard mutation could write, and the GPUs' reserved bytes. */
export async function shardRowCounts(h: ApiTestHarness) {
  const [shards, reservations, audits, reserved] = await Promise.all([
    h.prisma.shard.count(),
    h.prisma.shardGpu.count(),
    h.prisma.auditEvent.count(),
    h.prisma.gpu.aggregate({ _sum: { reservedBytes: true } }),
  ]);
  return { shards, reservations, audits, reserved: reserved._sum.reservedBytes ?? 0n };
}

/** One GPU's reserved bytes as the database has them. */
export async function reservedOn(h: ApiTestHarness, uuid: string): Promise<number> {
  const gpu = await h.prisma.gpu.findUniqueOrThrow({ where: { uuid } });
  return Number(gpu.reservedBytes);
}

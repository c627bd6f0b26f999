import {
  bytes,
  effectiveGpuModelFilter,
  type GpuModelFilter,
  type PlacementRequest,
  type QuotaDenial,
  type QuotaPolicy,
  type TeamUsage,
} from '@gpushards/limits';
import { Prisma, type RawSql } from '../database/index.js';
import { QuotaExceededError } from '../errors/domain-errors.js';
import type { PlacementRequestInput } from './shard-input.js';

/** A team's quota policy and what its live shards hold, as one transaction read them. */
export interface TeamState {
  readonly teamId: string;
  readonly hasPolicy: boolean;
  readonly maxTotalBytes: bigint | null;
  readonly maxShards: number | null;
  readonly maxBytesPerShard: bigint | null;
  readonly maxGpusPerShard: number | null;
  readonly allowedGpuModels: string[] | null;
  /** The team's image prefixes (null: no policy; empty: any image). */
  readonly allowedImages: string[] | null;
  readonly priority: number | null;
  readonly guaranteeBytes: bigint | null;
  /** The GPU models the guarantee covers (a case-insensitive substring; null: any). */
  readonly guaranteeGpuModel: string | null;
  /**
   * Requested bytes of the team's shards that hold GPUs the guarantee covers (stopping ones
   * left out): what a non-preemptible shard is checked against, as admission checks it. Read
   * only for the teams named in `coveredFor` (a sum over the team's shards with their GPUs);
   * null for the others.
   */
  readonly guaranteedModelBytes: bigint | null;
  readonly maxPriorityClass: string | null;
  /** The largest compute share per GPU, percent (null: up to 100; 0: none). */
  readonly maxComputeSharePercent: number | null;
  readonly shardCount: number;
  readonly reservedBytes: bigint;
}

type Reader = Pick<RawSql, '$queryRaw'>;

/**
 * The teams that exist among `teamIds`, by id. Lock them first when the answer decides a write.
 * `coveredFor`: the teams whose guaranteedModelBytes is wanted (those placing a
 * non-preemptible shard); the others' is left null, unread.
 */
export async function readTeamStates(
  reader: Reader,
  teamIds: readonly string[],
  coveredFor: readonly string[] = [],
  { foldUsage = false }: { foldUsage?: boolean } = {},
): Promise<Map<string, TeamState>> {
  // Folding rewrites the teams' usage rows as one row each; the SELECT below still sums the
  // rows as they were when the statement began, which add up to the same. Only a holder of the
  // teams' locks folds (createShard): two folds at once could each miss the other's new row.
  const fold = foldUsage
    ? Prisma.sql`
      WITH folded AS (
        DELETE FROM team_quota_usage WHERE team_id = ANY(${[...teamIds]}::uuid[])
        RETURNING team_id, shards, bytes
      ), refolded AS (
        INSERT INTO team_quota_usage (team_id, shards, bytes)
        SELECT team_id, sum(shards)::int, sum(bytes)::bigint FROM folded GROUP BY team_id
      )`
    : Prisma.empty;
  const rows = await reader.$queryRaw<TeamState[]>`
    ${fold}
    SELECT team.id::text AS "teamId",
           quota.team_id IS NOT NULL AS "hasPolicy",
           quota.max_total_bytes AS "maxTotalBytes", quota.max_shards AS "maxShards",
           quota.max_bytes_per_shard AS "maxBytesPerShard",
           quota.max_gpus_per_shard AS "maxGpusPerShard",
           quota.allowed_gpu_models AS "allowedGpuModels",
           quota.allowed_images AS "allowedImages", quota.priority,
           quota.guarantee_bytes AS "guaranteeBytes",
           quota.guarantee_gpu_model AS "guaranteeGpuModel",
           covered.bytes AS "guaranteedModelBytes",
           quota.max_priority_class AS "maxPriorityClass",
           quota.max_compute_share_percent AS "maxComputeSharePercent",
           held.shards AS "shardCount", held.bytes AS "reservedBytes"
      FROM team
      LEFT JOIN quota_policy quota ON quota.team_id = team.id
      CROSS JOIN LATERAL (
        -- What its shards in the quota states request: the rows the shard trigger appends.
        SELECT coalesce(sum(usage.shards), 0)::int AS shards,
               coalesce(sum(usage.bytes), 0)::bigint AS bytes
          FROM team_quota_usage usage
         WHERE usage.team_id = team.id
      ) held
      CROSS JOIN LATERAL (
        -- CASE runs the sum only for the teams asked (it reads every live shard's GPUs).
        SELECT CASE WHEN team.id = ANY(${[...coveredFor]}::uuid[]) THEN (
          SELECT coalesce(sum(shard.bytes_per_gpu * shard.gpu_count), 0)::bigint
            FROM shard
           WHERE shard.team_id = team.id AND shard.state IN ('PLACED', 'STARTING', 'RUNNING')
             AND EXISTS (
               SELECT 1 FROM shard_gpu JOIN gpu ON gpu.uuid = shard_gpu.gpu_uuid
                WHERE shard_gpu.shard_id = shard.id AND shard_gpu.released_at IS NULL
                  AND strpos(lower(gpu.model),
                             lower(trim(coalesce(quota.guarantee_gpu_model, '')))) > 0)
        ) END AS bytes
      ) covered
     WHERE team.id = ANY(${[...teamIds]}::uuid[])`;
  return new Map(rows.map((row) => [row.teamId, row]));
}

export async function readTeamState(
  reader: Reader,
  teamId: string,
): Promise<TeamState | undefined> {
  return (await readTeamStates(reader, [teamId])).get(teamId);
}

/**
 * The team's policy in libs/limits terms. No policy row: the team may place nothing (every
 * limit 0). An empty allowedGpuModels column means every model.
 */
export function quotaPolicyOf(team: TeamState): QuotaPolicy {
  if (!team.hasPolicy) {
    return { maxShards: 0, maxTotalBytes: bytes(0), priority: 0 };
  }
  return {
    maxTotalBytes: bytes(Number(team.maxTotalBytes ?? 0n)),
    maxShards: team.maxShards ?? 0,
    maxBytesPerShard: bytes(Number(team.maxBytesPerShard ?? 0n)),
    ...(team.maxGpusPerShard === null ? {} : { maxGpusPerShard: team.maxGpusPerShard }),
    ...(team.allowedGpuModels === null || team.allowedGpuModels.length === 0
      ? {}
      : { allowedGpuModels: team.allowedGpuModels }),
    priority: team.priority ?? 0,
  };
}

export function usageOf(team: TeamState): TeamUsage {
  return { reservedBytes: bytes(Number(team.reservedBytes)), shardCount: team.shardCount };
}

export function quotaError(denial: QuotaDenial): QuotaExceededError {
  const { allowed: _allowed, code: _code, message, ...numbers } = denial;
  return new QuotaExceededError(message, numbers);
}

/** The request as placement sees it: the policy's allowed models narrow its model filter. */
export function placementRequestOf(
  request: PlacementRequestInput,
  policy: QuotaPolicy | undefined,
): PlacementRequest {
  let gpuModel: GpuModelFilter = request.gpuModel;
  if (policy !== undefined) {
    const effective = effectiveGpuModelFilter(request.gpuModel, policy);
    if (effective.ok) gpuModel = effective.filter;
  }
  return {
    bytesPerGpu: bytes(request.bytesPerGpu),
    gpuCount: request.gpuCount,
    gpuModel,
    hostSelector: request.hostSelector,
    policy: request.policy === 'SPREAD' ? 'spread' : 'binpack',
    ...(request.compute.sharePermille > 0
      ? { computeSharePermille: request.compute.sharePermille }
      : {}),
  };
}

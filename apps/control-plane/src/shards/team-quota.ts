import {
  bytes,
  effectiveGpuModelFilter,
  type GpuModelFilter,
  type PlacementRequest,
  type QuotaDenial,
  type QuotaPolicy,
  type TeamUsage,
} from '@gpushards/limits';
import { isDeepStrictEqual } from 'node:util';
import { TEAM_LOCK_SPACE, type RawSql } from '../database/index.js';
import { ConflictError, QuotaExceededError } from '../errors/domain-errors.js';
import type { PlacementRequestInput } from './shard-input.js';

/** A team's quota policy and what its live shards hold, as one transaction read them. */
export interface TeamState {
  readonly teamId: string;
  readonly hasPolicy: boolean;
  /** Archived or deleted: it takes no new shards (createShard, startShard). */
  readonly archived: boolean;
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
 * The teams that exist among `teamIds`, by id (`team_quota_states`, migration
 * 20261127110500_team_quota_states, last made again in 20261128212135_team_archive_delete_host_removal).
 * `coveredFor`: the teams whose guaranteedModelBytes is
 * wanted (those placing a non-preemptible shard); the others' is left null, unread.
 *
 * `lockAndFold`: first take the teams' locks for the rest of the transaction (as
 * lockTeamForUpdate does, in key order) and fold each team's usage rows into one, in the same
 * round trip as the read. Use it where the answer decides a write; only there, since only lock
 * holders may fold. Must run inside a transaction.
 */
export async function readTeamStates(
  reader: Reader,
  teamIds: readonly string[],
  coveredFor: readonly string[] = [],
  {
    lockAndFold = false,
    genericPlans = false,
  }: {
    lockAndFold?: boolean;
    /**
     * For the rest of the transaction, run prepared statements with their generic plan
     * (`plan_cache_mode`, set in the same round trip): createShard's batch statement was
     * planned again at every call (0.3–1.4 ms of PostgreSQL per batch, most of its cost at
     * low rates), where its generic plan probes the same keys. Must run inside a transaction.
     */
    genericPlans?: boolean;
  } = {},
): Promise<Map<string, TeamState>> {
  const lockSpace = lockAndFold ? TEAM_LOCK_SPACE : null;
  const rows = genericPlans
    ? await reader.$queryRaw<TeamState[]>`
        SELECT states.*
          FROM (SELECT set_config('plan_cache_mode', 'force_generic_plan', true) AS mode) AS setting
         CROSS JOIN LATERAL team_quota_states(
           ${[...teamIds]}::text[], ${[...coveredFor]}::text[],
           CASE WHEN setting.mode IS NOT NULL THEN ${lockSpace}::int4 END) AS states`
    : await reader.$queryRaw<TeamState[]>`
        SELECT * FROM team_quota_states(${[...teamIds]}::text[], ${[...coveredFor]}::text[],
                                        ${lockSpace}::int4)`;
  return new Map(rows.map((row) => [row.teamId, row]));
}

/**
 * readTeamStates with `lockAndFold`, for a transaction that already holds row locks (a
 * createShard batch that wrote its shards before taking its teams' locks): a wait for a lock
 * longer than `lockTimeoutMs` fails the transaction (55P03, lock_not_available) instead of
 * waiting, since a holder of a team lock may be waiting for this transaction's GPU rows (a
 * deadlock that PostgreSQL would find only after deadlock_timeout). The timeout holds until
 * the transaction ends, set in the same round trip: the function's argument depends on it, so
 * it is set before the function takes its locks.
 */
export async function lockTeamStatesLate(
  tx: Reader,
  teamIds: readonly string[],
  lockTimeoutMs: number,
): Promise<Map<string, TeamState>> {
  const rows = await tx.$queryRaw<TeamState[]>`
    SELECT states.*
      FROM (SELECT set_config('lock_timeout', ${`${lockTimeoutMs}ms`}, true) AS timeout) AS setting
     CROSS JOIN LATERAL team_quota_states(
       ${[...teamIds]}::text[], '{}'::text[],
       CASE WHEN setting.timeout IS NOT NULL THEN ${TEAM_LOCK_SPACE}::int4 END) AS states`;
  return new Map(rows.map((row) => [row.teamId, row]));
}

/**
 * Whether the team's terms (everything but what it holds) are those of `read`: a batch decided
 * on `read` then decided by the same rules as under the lock.
 */
export function sameTerms(read: TeamState, locked: TeamState): boolean {
  const { shardCount: _c1, reservedBytes: _r1, guaranteedModelBytes: _g1, ...readTerms } = read;
  const { shardCount: _c2, reservedBytes: _r2, guaranteedModelBytes: _g2, ...lockedTerms } = locked;
  return isDeepStrictEqual(readTerms, lockedTerms);
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
    ...(request.compute.mode === 'ISOLATED' ? { computeMode: 'ISOLATED' as const } : {}),
  };
}

/** CONFLICT for a team that takes no new shards (archiveTeam, deleteTeam). */
export function archivedTeamError(teamId: string): ConflictError {
  return new ConflictError(
    `team ${teamId} is archived: it takes no new shards (an admin's unarchiveTeam brings it back)`,
  );
}

/**
 * Quota policy per team: what a team may hold, checked before placement.
 *
 * Quota counts what teams ask for: bytesPerGpu × gpuCount per shard. The CUDA context
 * overhead is left out: it differs between hosts, the team did not choose it, and a
 * team that asks for "2 × 12g" should be able to reason about "24 GiB of my 24 GiB quota".
 */
import { type Bytes, clampBytes, formatSize } from './sizes.js';
import type { GpuModelFilter, PlacementRequest } from './placement.js';

/** An absent limit is no limit. */
export interface QuotaPolicy {
  /** Sum of bytesPerGpu × gpuCount over the team's live shards. */
  readonly maxTotalBytes?: Bytes;
  readonly maxShards?: number;
  /** bytesPerGpu × gpuCount of one shard. */
  readonly maxBytesPerShard?: Bytes;
  readonly maxGpusPerShard?: number;
  /**
   * Case-insensitive substrings of GPU model names the team may use. An empty list allows
   * no model at all, which is how a team is paused without losing its other limits.
   */
  readonly allowedGpuModels?: readonly string[];
  /** Orders teams where the control plane has to (higher first); no limit here reads it. */
  readonly priority: number;
}

export interface TeamUsage {
  /** Sum over the team's live shards of bytesPerGpu × gpuCount, as requested (no overhead). */
  readonly reservedBytes: Bytes;
  readonly shardCount: number;
}

export type QuotaRequest = Pick<PlacementRequest, 'bytesPerGpu' | 'gpuCount' | 'gpuModel'>;

type ShardSize = Pick<PlacementRequest, 'bytesPerGpu' | 'gpuCount'>;

/** What one shard counts against its team's memory quota. */
export function quotaBytesOf(shard: ShardSize): Bytes {
  return clampBytes(shard.bytesPerGpu * shard.gpuCount);
}

export function teamUsageOf(liveShards: readonly ShardSize[]): TeamUsage {
  let total = 0;
  for (const shard of liveShards) total += quotaBytesOf(shard);
  return { reservedBytes: clampBytes(total), shardCount: liveShards.length };
}

export type QuotaDenial =
  | {
      readonly allowed: false;
      readonly code: 'QUOTA_EXCEEDED';
      readonly limit: 'maxTotalBytes' | 'maxShards';
      readonly requested: number;
      readonly limitValue: number;
      /** What the team holds now. */
      readonly current: number;
      readonly message: string;
    }
  | {
      readonly allowed: false;
      readonly code: 'QUOTA_EXCEEDED';
      readonly limit: 'maxBytesPerShard' | 'maxGpusPerShard';
      readonly requested: number;
      readonly limitValue: number;
      readonly message: string;
    }
  | {
      readonly allowed: false;
      readonly code: 'QUOTA_EXCEEDED';
      readonly limit: 'allowedGpuModels';
      /** The request's include terms that no allowed term covers (all of them when none is allowed). */
      readonly disallowed: readonly string[];
      readonly allowedModels: readonly string[];
      readonly message: string;
    };

export type QuotaLimit = QuotaDenial['limit'];

export type QuotaDecision = { readonly allowed: true } | QuotaDenial;

export type EffectiveModelFilter =
  | { readonly ok: true; readonly filter: GpuModelFilter }
  | {
      readonly ok: false;
      readonly disallowed: readonly string[];
      readonly allowed: readonly string[];
    };

function normalized(term: string): string {
  return term.trim().toLowerCase();
}

/**
 * The model filter placement should use: the intersection of what the request asks for and
 * what the policy allows. Each include term of the request must contain an allowed term
 * ("NVIDIA H100 80GB" is within "H100"); then every GPU the request matches is allowed and the
 * request's filter is the intersection as it stands. A request without include terms gets the
 * allowed list as its include terms. A request that names a model outside the list is refused
 * rather than narrowed, so that nobody gets a GPU other than the one they named.
 */
export function effectiveGpuModelFilter(
  requested: GpuModelFilter = {},
  policy: Pick<QuotaPolicy, 'allowedGpuModels'>,
): EffectiveModelFilter {
  const allowed = policy.allowedGpuModels;
  if (allowed === undefined) return { ok: true, filter: requested };
  const include = requested.include ?? [];
  if (allowed.length === 0) return { ok: false, disallowed: include, allowed };
  if (include.length === 0) {
    return { ok: true, filter: { ...requested, include: allowed } };
  }
  const allowedTerms = allowed.map(normalized);
  const disallowed = include.filter((term) => {
    const wanted = normalized(term);
    return !allowedTerms.some((allowedTerm) => wanted.includes(allowedTerm));
  });
  return disallowed.length === 0
    ? { ok: true, filter: requested }
    : { ok: false, disallowed, allowed };
}

function quoted(terms: readonly string[]): string {
  return terms.map((term) => `"${term}"`).join(', ');
}

/**
 * Whether the team may add this shard. Limits are checked in a fixed order, the shape of the
 * request first (models, GPUs per shard, bytes per shard: no amount of freeing helps), then
 * what the team holds (shard count, total bytes); the first one exceeded is reported.
 */
export function evaluateQuota(
  request: QuotaRequest,
  usage: TeamUsage,
  policy: QuotaPolicy,
): QuotaDecision {
  const models = effectiveGpuModelFilter(request.gpuModel, policy);
  if (!models.ok) {
    const message =
      models.allowed.length === 0
        ? 'team may use no GPU model: its allowed model list is empty'
        : `GPU model${models.disallowed.length === 1 ? '' : 's'} ${quoted(models.disallowed)} ` +
          `not allowed for this team (allowed: ${quoted(models.allowed)})`;
    return {
      allowed: false,
      code: 'QUOTA_EXCEEDED',
      limit: 'allowedGpuModels',
      disallowed: models.disallowed,
      allowedModels: models.allowed,
      message,
    };
  }
  const { maxGpusPerShard, maxBytesPerShard, maxShards, maxTotalBytes } = policy;
  if (maxGpusPerShard !== undefined && request.gpuCount > maxGpusPerShard) {
    return {
      allowed: false,
      code: 'QUOTA_EXCEEDED',
      limit: 'maxGpusPerShard',
      requested: request.gpuCount,
      limitValue: maxGpusPerShard,
      message:
        `too many GPUs for team policy: ${request.gpuCount} requested ` +
        `> limit ${maxGpusPerShard} per shard`,
    };
  }
  const shardBytes = quotaBytesOf(request);
  if (maxBytesPerShard !== undefined && shardBytes > maxBytesPerShard) {
    return {
      allowed: false,
      code: 'QUOTA_EXCEEDED',
      limit: 'maxBytesPerShard',
      requested: shardBytes,
      limitValue: maxBytesPerShard,
      message:
        `shard too large for team policy: ${request.gpuCount} GPU${request.gpuCount === 1 ? '' : 's'} ` +
        `× ${formatSize(request.bytesPerGpu)} ` +
        `= ${formatSize(shardBytes)} > limit ${formatSize(maxBytesPerShard)} per shard`,
    };
  }
  if (maxShards !== undefined && usage.shardCount + 1 > maxShards) {
    return {
      allowed: false,
      code: 'QUOTA_EXCEEDED',
      limit: 'maxShards',
      requested: 1,
      limitValue: maxShards,
      current: usage.shardCount,
      message:
        `team shard quota exceeded: ${usage.shardCount} held + 1 requested ` +
        `= ${usage.shardCount + 1} > limit ${maxShards}`,
    };
  }
  const after = usage.reservedBytes + shardBytes;
  if (maxTotalBytes !== undefined && after > maxTotalBytes) {
    return {
      allowed: false,
      code: 'QUOTA_EXCEEDED',
      limit: 'maxTotalBytes',
      requested: shardBytes,
      limitValue: maxTotalBytes,
      current: usage.reservedBytes,
      message:
        `team memory quota exceeded: ${formatSize(usage.reservedBytes)} held ` +
        `+ ${formatSize(shardBytes)} requested = ${formatSize(clampBytes(after))} ` +
        `> limit ${formatSize(maxTotalBytes)}`,
    };
  }
  return { allowed: true };
}

/**
 * Whether a team's usage, read under its lock at the end of a transaction that added shards
 * to it (those shards included), is within the team's limits. createShard decides a batch on
 * a read taken without the lock and takes the lock only to commit; every create it accepted
 * was within the limits after the creates before it in that read, and each added to the usage,
 * so a total within the limits means each was also within them after everything committed
 * before it: the outcome of a run that had taken the lock first. A total over a limit means
 * the read was stale in a way that matters; the batch is decided again under the lock.
 */
export function withinQuotaLimits(usage: TeamUsage, policy: QuotaPolicy): boolean {
  return (
    (policy.maxShards === undefined || usage.shardCount <= policy.maxShards) &&
    (policy.maxTotalBytes === undefined || usage.reservedBytes <= policy.maxTotalBytes)
  );
}

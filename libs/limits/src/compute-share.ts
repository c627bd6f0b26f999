/**
 * A shard's compute share per GPU (issue 17; enforcement in libvgpu.so, docs/compute.md):
 * the pure decisions the control plane makes about it. Shares are in permille here and in
 * the limits file (`compute_share_permille`); people give percentages.
 *
 * - guaranteed (the default): at least its share of the GPU while it is contended, and any
 *   time nobody else wants (work-conserving);
 * - capped: never more than its share. A capped shard also gets its share when contended,
 *   so both modes count towards the GPU's guaranteed total, which stays ≤ 100%.
 * - isolated: its share of the GPU's SMs in the MPS partition its host keeps for such shards
 *   (P permille of every GPU, `isolatedPoolPermille`): no turns, no neighbour on its SMs, never
 *   more than its share. Every other shard of that host is an MPS client at 1000 − P, so the
 *   isolated shares of a GPU fit within P and the others' within 1000 − P (`computeShareFits`).
 *   An MPS client's percentage is fixed when its process starts: a running isolated shard's
 *   share and mode do not change (`isolatedShareChangeRefusal`).
 * - A shard with no share guarantees nothing: it gets an equal split of what the shards
 *   with a share leave, and at least MIN_DEFAULT_SHARE_PERMILLE (the same rule libvgpu.so
 *   applies at run time, compute.c `weight()`).
 */

export const COMPUTE_MODES = ['GUARANTEED', 'CAPPED', 'ISOLATED'] as const;
export type ComputeMode = (typeof COMPUTE_MODES)[number];

export const FULL_GPU_PERMILLE = 1000;
/** What a shard with no share is weighted with, at least, however full the GPU is. */
export const MIN_DEFAULT_SHARE_PERMILLE = 50;

/** What a team may ask for; absent fields do not restrict. */
export interface TeamComputePolicy {
  /** The largest share per GPU one shard of the team may ask for, 1–100. */
  readonly maxSharePercent?: number;
  /** Whether the team may ask for shares at all (false: only the default, no guarantee). */
  readonly sharesAllowed?: boolean;
}

export interface ComputeRequest {
  /** Whole percent, 1–100; absent: no guarantee (the default split). */
  readonly sharePercent?: number | null;
  /** GUARANTEED when absent. */
  readonly mode?: ComputeMode | null;
}

/** 0 permille: no share (the default split). */
export interface ComputeShare {
  readonly sharePermille: number;
  readonly mode: ComputeMode;
}

export type ComputeRefusal =
  | { readonly kind: 'invalid-share'; readonly sharePercent: number }
  | { readonly kind: 'invalid-mode'; readonly mode: string }
  | { readonly kind: 'capped-without-share' }
  | { readonly kind: 'isolated-without-share' }
  /** A running isolated shard's share or mode changed, or a running shard made isolated. */
  | {
      readonly kind: 'isolated-share-fixed';
      readonly from: ComputeShare;
      readonly to: ComputeShare;
    }
  | { readonly kind: 'shares-not-allowed' }
  | {
      readonly kind: 'over-team-limit';
      readonly sharePercent: number;
      readonly maxSharePercent: number;
    }
  | {
      readonly kind: 'gpu-over-guaranteed';
      readonly gpuUuid: string;
      /** What the other shards outside the isolated partition guarantee there. */
      readonly guaranteedPermille: number;
      readonly sharePermille: number;
      /** The host's isolated partition, when it has one (the rest is 1000 − it). */
      readonly isolatedPoolPermille?: number;
    }
  | {
      readonly kind: 'gpu-over-isolated-pool';
      readonly gpuUuid: string;
      /** What the other isolated shards hold of the partition. */
      readonly isolatedPermille: number;
      readonly sharePermille: number;
      /** 0: the host runs no isolated partition. */
      readonly isolatedPoolPermille: number;
    };

export type ComputeDecision<T> =
  | { readonly ok: true; readonly value: T }
  | { readonly ok: false; readonly refusal: ComputeRefusal };

function refuse<T>(refusal: ComputeRefusal): ComputeDecision<T> {
  return { ok: false, refusal };
}

/** The request checked against the team's policy: the share to store, or why not. */
export function resolveComputeShare(
  request: ComputeRequest,
  policy: TeamComputePolicy = {},
): ComputeDecision<ComputeShare> {
  const mode = request.mode ?? 'GUARANTEED';
  if (!(COMPUTE_MODES as readonly string[]).includes(mode)) {
    return refuse({ kind: 'invalid-mode', mode: String(mode) });
  }
  const percent = request.sharePercent ?? null;
  if (percent === null) {
    // Capped at "an equal split of the rest" is not a predictable cap: a cap needs a number.
    if (mode === 'CAPPED') return refuse({ kind: 'capped-without-share' });
    // An MPS client needs a percentage of its own.
    if (mode === 'ISOLATED') return refuse({ kind: 'isolated-without-share' });
    return { ok: true, value: { sharePermille: 0, mode } };
  }
  if (!Number.isSafeInteger(percent) || percent < 1 || percent > 100) {
    return refuse({ kind: 'invalid-share', sharePercent: percent });
  }
  if (policy.sharesAllowed === false) return refuse({ kind: 'shares-not-allowed' });
  const max = policy.maxSharePercent;
  if (max !== undefined && percent > max) {
    return refuse({ kind: 'over-team-limit', sharePercent: percent, maxSharePercent: max });
  }
  return { ok: true, value: { sharePermille: percent * 10, mode } };
}

/**
 * Whether a share of `sharePermille` fits on a GPU whose placed shards guarantee
 * `guaranteedPermille`, on a host without an isolated partition (computeShareFits in general).
 */
export function guaranteedShareFits(guaranteedPermille: number, sharePermille: number): boolean {
  return sharePermille === 0 || guaranteedPermille + sharePermille <= FULL_GPU_PERMILLE;
}

/** What a GPU holds of compute, as `Gpu` (inventory.ts) names it; absent fields are 0. */
export interface GpuComputeLoad {
  /** The shares of every shard placed on it, isolated ones included. */
  readonly guaranteedComputePermille?: number;
  /** The shares of the ISOLATED shards placed on it (≤ guaranteedComputePermille). */
  readonly isolatedComputePermille?: number;
  /** P: the part of the GPU its host's MPS partition keeps for ISOLATED shards; 0 = none. */
  readonly isolatedPoolPermille?: number;
}

/**
 * The fit rule for a share in its mode, on one GPU:
 *
 * - ISOLATED fits iff the host has a partition (P > 0) and isolated + share ≤ P;
 * - any other share fits iff it is 0 or (guaranteed − isolated) + share ≤ 1000 − P.
 *
 * Either way all the shares of the GPU stay ≤ 1000, also when an agent re-registered with
 * another P while shards ran (the pool then no longer bounds what is already there).
 */
export function computeShareFits(
  gpu: GpuComputeLoad,
  sharePermille: number,
  mode: ComputeMode,
): boolean {
  const guaranteed = gpu.guaranteedComputePermille ?? 0;
  const isolated = gpu.isolatedComputePermille ?? 0;
  const pool = gpu.isolatedPoolPermille ?? 0;
  if (mode === 'ISOLATED') {
    return (
      pool > 0 &&
      isolated + sharePermille <= pool &&
      guaranteed + sharePermille <= FULL_GPU_PERMILLE
    );
  }
  return (
    sharePermille === 0 ||
    (guaranteed - isolated + sharePermille <= FULL_GPU_PERMILLE - pool &&
      guaranteed + sharePermille <= FULL_GPU_PERMILLE)
  );
}

/**
 * What the GPU still has for a share in this mode, permille: the isolated partition's rest
 * for ISOLATED, what the shards outside it leave of 1000 − P for the others.
 */
export function freeComputePermille(gpu: GpuComputeLoad, mode: ComputeMode): number {
  const guaranteed = gpu.guaranteedComputePermille ?? 0;
  const isolated = gpu.isolatedComputePermille ?? 0;
  const pool = gpu.isolatedPoolPermille ?? 0;
  const total = FULL_GPU_PERMILLE - guaranteed;
  const side =
    mode === 'ISOLATED' ? pool - isolated : FULL_GPU_PERMILLE - pool - (guaranteed - isolated);
  return Math.max(0, Math.min(total, side));
}

/**
 * Whether a shard that holds its GPUs may go from `from` to `to`: an isolated shard runs as an
 * MPS client whose percentage is fixed when its process starts, so neither its share nor its
 * mode changes while it runs, and a running shard does not become isolated.
 */
export function isolatedShareChangeRefusal(
  from: ComputeShare,
  to: ComputeShare,
): ComputeRefusal | undefined {
  if (from.mode !== 'ISOLATED' && to.mode !== 'ISOLATED') return undefined;
  if (from.mode === to.mode && from.sharePermille === to.sharePermille) return undefined;
  return { kind: 'isolated-share-fixed', from, to };
}

/** One GPU of a shard whose share changes, as the others on it leave it. */
export interface ResizeGpu {
  readonly gpuUuid: string;
  /** The GPU's guaranteed total without this shard. */
  readonly othersPermille: number;
  /** Of those, what ISOLATED shards hold; absent: 0. */
  readonly othersIsolatedPermille?: number;
  /** The host's isolated partition; absent: 0 (none). */
  readonly isolatedPoolPermille?: number;
}

/**
 * Changing a running shard's share: every GPU it holds must take the new share beside the
 * others'. With `current` (the shard's share now), an isolated shard's share and mode stay
 * as they are (isolatedShareChangeRefusal), and a share that does not grow always fits (a
 * GPU whose host's partition grew under it may hold more than 1000 − P outside it).
 */
export function resizeComputeShare(
  request: ComputeRequest,
  policy: TeamComputePolicy,
  gpus: readonly ResizeGpu[],
  current?: ComputeShare,
): ComputeDecision<ComputeShare> {
  if (current !== undefined) {
    const asked = resolveComputeShare(request);
    if (!asked.ok) return asked;
    const fixed = isolatedShareChangeRefusal(current, asked.value);
    if (fixed !== undefined) return refuse(fixed);
  }
  const resolved = resolveComputeShare(request, policy);
  if (!resolved.ok) return resolved;
  const { sharePermille, mode } = resolved.value;
  if (current !== undefined && sharePermille <= current.sharePermille) return resolved;
  for (const gpu of gpus) {
    const load: GpuComputeLoad = {
      guaranteedComputePermille: gpu.othersPermille,
      isolatedComputePermille: gpu.othersIsolatedPermille ?? 0,
      isolatedPoolPermille: gpu.isolatedPoolPermille ?? 0,
    };
    if (computeShareFits(load, sharePermille, mode)) continue;
    const pool = gpu.isolatedPoolPermille ?? 0;
    const isolated = gpu.othersIsolatedPermille ?? 0;
    if (mode === 'ISOLATED' && (pool === 0 || isolated + sharePermille > pool)) {
      return refuse({
        kind: 'gpu-over-isolated-pool',
        gpuUuid: gpu.gpuUuid,
        isolatedPermille: isolated,
        sharePermille,
        isolatedPoolPermille: pool,
      });
    }
    return refuse({
      kind: 'gpu-over-guaranteed',
      gpuUuid: gpu.gpuUuid,
      guaranteedPermille: mode === 'ISOLATED' ? gpu.othersPermille : gpu.othersPermille - isolated,
      sharePermille,
      ...(pool > 0 && mode !== 'ISOLATED' ? { isolatedPoolPermille: pool } : {}),
    });
  }
  return resolved;
}

/**
 * The weight each shard of one GPU runs with (permille): its share, or for a shard with
 * none an equal split of what the shares leave, at least MIN_DEFAULT_SHARE_PERMILLE.
 */
export function effectiveSharesPermille(shares: readonly number[]): number[] {
  let taken = 0;
  let unset = 0;
  for (const share of shares) {
    if (share > 0) taken += share;
    else unset++;
  }
  const left = Math.max(0, FULL_GPU_PERMILLE - taken);
  const split = unset > 0 ? Math.floor(left / unset) : left;
  const fallback = Math.max(MIN_DEFAULT_SHARE_PERMILLE, split);
  return shares.map((share) => (share > 0 ? share : fallback));
}

export function describeComputeRefusal(refusal: ComputeRefusal): string {
  switch (refusal.kind) {
    case 'invalid-share':
      return `compute share must be a whole percentage from 1 to 100, not ${refusal.sharePercent}`;
    case 'invalid-mode':
      return `compute mode must be GUARANTEED, CAPPED or ISOLATED, not ${refusal.mode}`;
    case 'capped-without-share':
      return 'a CAPPED compute mode needs a compute share';
    case 'isolated-without-share':
      return 'an ISOLATED compute mode needs a compute share (its part of the MPS partition)';
    case 'isolated-share-fixed':
      return (
        `an isolated shard's share is fixed while it holds its GPUs (an MPS client's percentage ` +
        `is set when its process starts): ${describeShare(refusal.from)} cannot become ` +
        `${describeShare(refusal.to)}; stop it and start it with the new share`
      );
    case 'shares-not-allowed':
      return "the team's policy does not allow compute shares";
    case 'over-team-limit':
      return `compute share ${refusal.sharePercent}% is over the team's limit of ${refusal.maxSharePercent}%`;
    case 'gpu-over-guaranteed': {
      const pool = refusal.isolatedPoolPermille ?? 0;
      return (
        `GPU ${refusal.gpuUuid} already guarantees ${refusal.guaranteedPermille / 10}% to other shards; ` +
        `${refusal.sharePermille / 10}% more would pass ${(FULL_GPU_PERMILLE - pool) / 10}%` +
        (pool > 0 ? ` (what its host's ${pool / 10}% isolated partition leaves)` : '')
      );
    }
    case 'gpu-over-isolated-pool':
      return refusal.isolatedPoolPermille === 0
        ? `GPU ${refusal.gpuUuid}'s host runs no isolated (MPS) partition, which an ISOLATED shard needs`
        : `GPU ${refusal.gpuUuid}'s isolated partition of ${refusal.isolatedPoolPermille / 10}% ` +
            `already holds ${refusal.isolatedPermille / 10}% for other isolated shards; ` +
            `${refusal.sharePermille / 10}% more would pass it`;
  }
}

function describeShare(share: ComputeShare): string {
  return share.sharePermille === 0
    ? `${share.mode} with no share`
    : `${share.mode} ${share.sharePermille / 10}%`;
}

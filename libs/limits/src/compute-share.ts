/**
 * A shard's compute share per GPU (issue 17; enforcement in libvgpu.so, docs/compute.md):
 * the pure decisions the control plane makes about it. Shares are in permille here and in
 * the limits file (`compute_share_permille`); people give percentages.
 *
 * - guaranteed (the default): at least its share of the GPU while it is contended, and any
 *   time nobody else wants (work-conserving);
 * - capped: never more than its share. A capped shard also gets its share when contended,
 *   so both modes count towards the GPU's guaranteed total, which stays ≤ 100%.
 * - A shard with no share guarantees nothing: it gets an equal split of what the shards
 *   with a share leave, and at least MIN_DEFAULT_SHARE_PERMILLE (the same rule libvgpu.so
 *   applies at run time, compute.c `weight()`).
 */

export const COMPUTE_MODES = ['GUARANTEED', 'CAPPED'] as const;
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
  | { readonly kind: 'shares-not-allowed' }
  | {
      readonly kind: 'over-team-limit';
      readonly sharePercent: number;
      readonly maxSharePercent: number;
    }
  | {
      readonly kind: 'gpu-over-guaranteed';
      readonly gpuUuid: string;
      readonly guaranteedPermille: number;
      readonly sharePermille: number;
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

/** Whether a share of `sharePermille` fits on a GPU whose placed shards guarantee `guaranteedPermille`. */
export function guaranteedShareFits(guaranteedPermille: number, sharePermille: number): boolean {
  return sharePermille === 0 || guaranteedPermille + sharePermille <= FULL_GPU_PERMILLE;
}

/**
 * Changing a running shard's share: every GPU it holds must take the new share beside the
 * others' (`othersPermille`: the GPU's guaranteed total without this shard).
 */
export function resizeComputeShare(
  request: ComputeRequest,
  policy: TeamComputePolicy,
  gpus: readonly { readonly gpuUuid: string; readonly othersPermille: number }[],
): ComputeDecision<ComputeShare> {
  const resolved = resolveComputeShare(request, policy);
  if (!resolved.ok) return resolved;
  for (const gpu of gpus) {
    if (!guaranteedShareFits(gpu.othersPermille, resolved.value.sharePermille)) {
      return refuse({
        kind: 'gpu-over-guaranteed',
        gpuUuid: gpu.gpuUuid,
        guaranteedPermille: gpu.othersPermille,
        sharePermille: resolved.value.sharePermille,
      });
    }
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
      return `compute mode must be GUARANTEED or CAPPED, not ${refusal.mode}`;
    case 'capped-without-share':
      return 'a CAPPED compute mode needs a compute share';
    case 'shares-not-allowed':
      return "the team's policy does not allow compute shares";
    case 'over-team-limit':
      return `compute share ${refusal.sharePercent}% is over the team's limit of ${refusal.maxSharePercent}%`;
    case 'gpu-over-guaranteed':
      return (
        `GPU ${refusal.gpuUuid} already guarantees ${refusal.guaranteedPermille / 10}% to other shards; ` +
        `${refusal.sharePermille / 10}% more would pass 100%`
      );
  }
}

/** Compute shares and GPU activity (docs/compute.md) as the portal shows them. */

export type ComputeModeName = 'GUARANTEED' | 'CAPPED' | 'ISOLATED';

/** What each mode means, for the create form's hint. */
export const COMPUTE_MODE_HINTS: Record<ComputeModeName, string> = {
  GUARANTEED: 'at least its share while the GPU is contended, and any time nobody else wants',
  CAPPED: 'never more than its share, even alone',
  ISOLATED:
    "its share of the GPU's SMs in an MPS partition of its own, only on hosts that run one; never more, and its latency held whatever its neighbours do; the share is fixed while it runs",
};

export interface ComputeGpu {
  readonly releasedAt: string | null;
  readonly busyRatio?: number | null;
  readonly lastKernelAt?: string | null;
}

export interface ComputeShard {
  readonly state: string;
  readonly computeSharePercent: number | null;
  readonly computeMode: ComputeModeName;
  readonly gpus: readonly ComputeGpu[];
}

/** "25% guaranteed", "25% capped", "25% isolated", or "default split" for a shard with no share. */
export function shareLabel(percent: number | null, mode: ComputeModeName): string {
  if (percent === null) return 'default split';
  return `${percent}% ${mode.toLowerCase()}`;
}

/**
 * A GPU's compute as the fleet view shows it: "25% guaranteed", and on a host with an MPS
 * partition "…, isolated 10% of a 40% partition".
 */
export function gpuComputeLabel(gpu: {
  readonly computeGuaranteedPercent: number;
  readonly computeIsolatedPoolPercent: number;
  readonly computeIsolatedPercent: number;
}): string {
  const guaranteed = `compute ${gpu.computeGuaranteedPercent}% guaranteed`;
  if (gpu.computeIsolatedPoolPercent <= 0) return guaranteed;
  return `${guaranteed}, isolated ${gpu.computeIsolatedPercent}% of a ${gpu.computeIsolatedPoolPercent}% partition`;
}

/**
 * The team's compute gauge: of the GPUs its shards hold now (live reservations), how many GPUs'
 * worth of time their shares guarantee (25% on 2 GPUs is 0.5). Shards without a share
 * guarantee nothing.
 */
export function teamCompute(shards: readonly ComputeShard[]): {
  guaranteedGpus: number;
  gpusHeld: number;
} {
  let guaranteed = 0;
  let held = 0;
  for (const shard of shards) {
    const live = shard.gpus.filter((g) => g.releasedAt === null).length;
    held += live;
    guaranteed += (live * (shard.computeSharePercent ?? 0)) / 100;
  }
  return { guaranteedGpus: Math.round(guaranteed * 100) / 100, gpusHeld: held };
}

/** The shard's GPU busy ratio over its live GPUs (their mean), or null where none is reported. */
export function busyRatio(gpus: readonly ComputeGpu[]): number | null {
  const reported = gpus.filter(
    (g) => g.releasedAt === null && g.busyRatio !== null && g.busyRatio !== undefined,
  );
  if (reported.length === 0) return null;
  return reported.reduce((n, g) => n + g.busyRatio!, 0) / reported.length;
}

/**
 * Since when the shard has launched no kernel on any live GPU: its last kernel, or its start when
 * it never launched one; null when its host reports no activity for it (no compute ledger).
 */
export function idleSince(shard: {
  readonly startedAt: string | null;
  readonly gpus: readonly ComputeGpu[];
}): string | null {
  const live = shard.gpus.filter((g) => g.releasedAt === null);
  const observed = live.some(
    (g) =>
      (g.busyRatio !== null && g.busyRatio !== undefined) ||
      (g.lastKernelAt !== null && g.lastKernelAt !== undefined),
  );
  if (!observed) return null;
  const kernels = live
    .map((g) => g.lastKernelAt)
    .filter((at): at is string => typeof at === 'string')
    .sort();
  return kernels.at(-1) ?? shard.startedAt;
}

/** A share typed in a form: blank is none (the default split); else a whole percent 1-100. */
export function parseSharePercent(
  text: string,
): { ok: true; percent: number | null } | { ok: false; message: string } {
  const trimmed = text.trim().replace(/%$/, '').trim();
  if (trimmed === '') return { ok: true, percent: null };
  if (!/^\d+$/.test(trimmed) || Number(trimmed) < 1 || Number(trimmed) > 100) {
    return { ok: false, message: 'a whole percent from 1 to 100, or blank for none' };
  }
  return { ok: true, percent: Number(trimmed) };
}

/**
 * Why a share and mode cannot be sent as they are (the API's own rule: CAPPED and ISOLATED need
 * a share).
 */
export function computeProblem(shareText: string, mode: ComputeModeName): string | null {
  const share = parseSharePercent(shareText);
  if (!share.ok) return share.message;
  if (mode === 'CAPPED' && share.percent === null) return 'capped needs a share to cap at';
  if (mode === 'ISOLATED' && share.percent === null)
    return "isolated needs a share: its part of the host's MPS partition";
  return null;
}

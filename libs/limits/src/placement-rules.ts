/**
 * The rules placement applies to one host, shared by place() (one pass over the fleet) and
 * PlacementIndex (which remembers each host's score between requests). Not exported from the
 * package: placement.ts and placement-index.ts are the API.
 */
import { type Bytes, bytes, isBytes, MAX_BYTES } from './sizes.js';
import { computeShareFits, FULL_GPU_PERMILLE, type ComputeMode } from './compute-share.js';
import {
  DEFAULT_CONTEXT_OVERHEAD_BYTES,
  DEFAULT_OVERCOMMIT_RATIO,
  type Gpu,
  type Host,
} from './inventory.js';
import type {
  GpuCapacity,
  GpuModelFilter,
  NoFitReason,
  Placed,
  PlacementOptions,
  PlacementPolicy,
  PlacementRequest,
} from './placement.js';

export function checkedRatio(ratio: number): number {
  if (!(ratio > 0 && Number.isFinite(ratio))) {
    throw new RangeError(`overcommit ratio must be a positive finite number, not ${ratio}`);
  }
  return ratio;
}

/**
 * The one capacity rule, unbranded for speed: what a GPU can still take, the smaller of
 *   resident room  totalBytes − unownedBytes − reservedBytes   (what is physically there for
 *                  shards: nothing unowned processes hold is promised), and
 *   promise room   floor(totalBytes × ratio) − reservedBytes − suspendedBytes   (the caps of
 *                  its shards, on it and suspended, within the oversubscription ratio).
 * Negative when a neighbour grew or a ratio was lowered under what is already held.
 */
export function rawRoom(gpu: GpuCapacity, defaultRatio: number): number {
  const resident = gpu.totalBytes - (gpu.unownedBytes ?? 0) - gpu.reservedBytes;
  const promise = rawPromise(gpu, defaultRatio) - gpu.reservedBytes - (gpu.suspendedBytes ?? 0);
  return Math.min(resident, promise);
}

/** floor(totalBytes × ratio), clamped to MAX_BYTES: what the caps on a GPU may add up to. */
export function rawPromise(gpu: GpuCapacity, defaultRatio: number): number {
  return Math.min(
    Math.floor(gpu.totalBytes * checkedRatio(gpu.overcommitRatio ?? defaultRatio)),
    MAX_BYTES,
  );
}

export function normalizedTerms(terms: readonly string[] | undefined): string[] {
  return (terms ?? []).map((term) => term.trim().toLowerCase());
}

/** A fleet has a handful of distinct model names, so each is lowercased and tested once. */
export function modelMatcher(filter: GpuModelFilter): (model: string) => boolean {
  const include = normalizedTerms(filter.include);
  const exclude = normalizedTerms(filter.exclude);
  if (include.length === 0 && exclude.length === 0) return () => true;
  const verdicts = new Map<string, boolean>();
  return (model) => {
    let verdict = verdicts.get(model);
    if (verdict === undefined) {
      const name = model.toLowerCase();
      verdict =
        (include.length === 0 || include.some((term) => name.includes(term))) &&
        !exclude.some((term) => name.includes(term));
      verdicts.set(model, verdict);
    }
    return verdict;
  };
}

/** A request checked once, with what every host is tested against. */
export interface Plan {
  readonly bytesPerGpu: Bytes;
  readonly gpuCount: number;
  /** +1: less free first (binpack); −1: more free first (spread). */
  readonly order: 1 | -1;
  readonly filter: GpuModelFilter;
  readonly modelMatches: (model: string) => boolean;
  /** Sorted by key, so the first mismatch reported does not depend on key order. */
  readonly selector: readonly (readonly [string, string])[];
  readonly defaultOverhead: Bytes;
  readonly defaultRatio: number;
  /** Compute share per GPU, permille; 0: none asked. */
  readonly computeShare: number;
  /** Its mode: ISOLATED shares fit in the hosts' isolated partitions, the others beside them. */
  readonly computeMode: ComputeMode;
}

export function planOf(request: PlacementRequest, options: PlacementOptions): Plan {
  if (!Number.isSafeInteger(request.gpuCount) || request.gpuCount < 1) {
    throw new RangeError(`gpuCount must be a whole number of at least 1, not ${request.gpuCount}`);
  }
  if (!isBytes(request.bytesPerGpu) || request.bytesPerGpu === 0) {
    throw new RangeError(
      `bytesPerGpu must be a whole number of bytes above 0, not ${request.bytesPerGpu}`,
    );
  }
  const defaultOverhead = options.defaultOverheadBytes ?? DEFAULT_CONTEXT_OVERHEAD_BYTES;
  if (!isBytes(defaultOverhead)) {
    throw new RangeError(`defaultOverheadBytes must be a byte count, not ${defaultOverhead}`);
  }
  const defaultRatio = checkedRatio(options.defaultOvercommitRatio ?? DEFAULT_OVERCOMMIT_RATIO);
  const computeShare = request.computeSharePermille ?? 0;
  if (!Number.isSafeInteger(computeShare) || computeShare < 0 || computeShare > FULL_GPU_PERMILLE) {
    throw new RangeError(
      `computeSharePermille must be a whole number from 0 to 1000, not ${computeShare}`,
    );
  }
  const computeMode = request.computeMode ?? 'GUARANTEED';
  if (computeMode !== 'GUARANTEED' && computeMode !== 'CAPPED' && computeMode !== 'ISOLATED') {
    throw new RangeError(`computeMode must be GUARANTEED, CAPPED or ISOLATED, not ${computeMode}`);
  }
  const filter = request.gpuModel ?? {};
  return {
    bytesPerGpu: request.bytesPerGpu,
    gpuCount: request.gpuCount,
    order: preferenceOrder(request.policy ?? 'binpack'),
    filter,
    modelMatches: modelMatcher(filter),
    selector: Object.entries(request.hostSelector ?? {}).sort(([a], [b]) => compareText(a, b)),
    defaultOverhead,
    defaultRatio,
    computeShare,
    computeMode,
  };
}

/** The GPU can still take the plan's compute share in its mode (compute-share.ts). */
export function computeFits(gpu: Gpu, plan: Plan): boolean {
  return computeShareFits(gpu, plan.computeShare, plan.computeMode);
}

export function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** +1: smaller free first (binpack); −1: larger free first (spread). */
export function preferenceOrder(policy: PlacementPolicy): 1 | -1 {
  switch (policy) {
    case 'binpack':
      return 1;
    case 'spread':
      return -1;
    default:
      return unreachable(policy);
  }
}

/** Whether GPU a, with `freeA` free, is taken before GPU b. */
export function prefers(order: 1 | -1, freeA: number, a: Gpu, freeB: number, b: Gpu): boolean {
  const byFree = order * (freeA - freeB);
  if (byFree !== 0) return byFree < 0;
  if (a.index !== b.index) return a.index < b.index;
  return a.uuid < b.uuid;
}

/**
 * The gpuCount most preferred GPUs of one host, best first. Kept in a bounded buffer by
 * insertion, so a host costs O(GPUs × gpuCount) and nothing is allocated per GPU; the
 * buffer is reused across hosts.
 */
export interface Picks {
  readonly gpus: Gpu[];
  readonly free: number[];
  count: number;
}

/** Fills `picks` from the host; returns the picks' score (their total free bytes) or NaN. */
export function pickOn(host: Host, plan: Plan, need: number, picks: Picks): number {
  const k = plan.gpuCount;
  const { gpus, free } = picks;
  picks.count = 0;
  for (const gpu of host.gpus) {
    if (!plan.modelMatches(gpu.model)) continue;
    const available = rawRoom(gpu, plan.defaultRatio);
    if (available < need || !computeFits(gpu, plan)) continue;
    const full = picks.count === k;
    if (full && !prefers(plan.order, available, gpu, free[k - 1]!, gpus[k - 1]!)) continue;
    let slot = full ? k - 1 : picks.count++;
    while (slot > 0 && prefers(plan.order, available, gpu, free[slot - 1]!, gpus[slot - 1]!)) {
      free[slot] = free[slot - 1]!;
      gpus[slot] = gpus[slot - 1]!;
      slot--;
    }
    free[slot] = available;
    gpus[slot] = gpu;
  }
  if (picks.count < k) return Number.NaN;
  let score = 0;
  for (let i = 0; i < k; i++) score += free[i]!;
  return score;
}

export function unreachable(value: never): never {
  throw new Error(`unhandled variant: ${JSON.stringify(value)}`);
}

const OFFLINE: NoFitReason = { kind: 'host-offline' };
const CORDONED: NoFitReason = { kind: 'host-cordoned' };

const DRAINING: NoFitReason = { kind: 'host-draining' };

/** Reasons that do not look at GPUs: the host's state and labels. */
export function gateReason(host: Host, plan: Plan): NoFitReason | undefined {
  switch (host.state) {
    case 'ONLINE':
      break;
    case 'OFFLINE':
      return OFFLINE;
    case 'CORDONED':
      return CORDONED;
    case 'DRAINING':
      return DRAINING;
    default:
      return unreachable(host.state);
  }
  for (const [key, wanted] of plan.selector) {
    const actual = Object.hasOwn(host.labels, key) ? host.labels[key] : undefined;
    if (actual !== wanted) return { kind: 'label-mismatch', key, wanted, actual: actual ?? null };
  }
  return undefined;
}

/** Per GPU on this host: what the shard asked for plus the host's context overhead. */
export function needOn(host: Host, plan: Plan): number {
  return plan.bytesPerGpu + (host.contextOverheadBytes ?? plan.defaultOverhead);
}

/** The host's score for the plan (see pickOn), NaN when it cannot take the shard; uses `picks`. */
export function scoreOn(host: Host, plan: Plan, picks: Picks): number {
  if (gateReason(host, plan) !== undefined) return Number.NaN;
  return pickOn(host, plan, needOn(host, plan), picks);
}

/**
 * Whether a host that can take the shard with `score` goes before the best so far: by the
 * policy's order of scores, then the smaller host id.
 */
export function beats(
  plan: Plan,
  score: number,
  hostId: string,
  best: { readonly score: number; readonly hostId: string } | undefined,
): boolean {
  if (best === undefined) return true;
  const byScore = plan.order * (score - best.score);
  return byScore < 0 || (byScore === 0 && hostId < best.hostId);
}

/** The answer for the chosen host: its GPUs picked again, ordered by index. */
export function placedOn(host: Host, plan: Plan, picks: Picks): Placed {
  const need = needOn(host, plan);
  pickOn(host, plan, need, picks);
  const chosen = picks.gpus
    .slice(0, plan.gpuCount)
    .sort((a, b) => a.index - b.index || compareText(a.uuid, b.uuid));
  return {
    kind: 'placed',
    hostId: host.id,
    gpuUuids: chosen.map((gpu) => gpu.uuid),
    bytesPerGpu: plan.bytesPerGpu,
    reservedBytesPerGpu: bytes(need),
  };
}

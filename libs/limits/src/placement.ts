/**
 * Placement: which host and which of its GPUs take a new shard, or why none can.
 *
 * A GPU can take a shard when reservedBytes + need <= totalBytes − unownedBytes (nothing past
 * what it physically offers shards) and reservedBytes + suspendedBytes + need <=
 * floor(totalBytes × overcommitRatio) (the caps of its shards, on it and suspended, within its
 * oversubscription ratio), where need = bytesPerGpu + the host's per-shard context overhead
 * (placement-rules.ts rawRoom). All of a shard's GPUs
 * are on one host. Only ONLINE hosts take shards. Among hosts that can, the policy picks:
 *
 *   binpack  the host whose chosen GPUs have the least free memory in total, taking on each
 *            host the fullest GPUs that fit, so whole GPUs stay free for big requests;
 *   spread   the host whose chosen GPUs have the most free memory, taking the emptiest GPUs.
 *
 * Ties go to the smaller host id (code-unit order), then the smaller GPU index, then the
 * smaller UUID, so the result does not depend on the order of the fleet or of its GPUs.
 */
import { type Bytes, bytes, clampBytes, formatSize } from './sizes.js';
import { freeComputePermille, type ComputeMode } from './compute-share.js';
import {
  DEFAULT_CONTEXT_OVERHEAD_BYTES,
  DEFAULT_OVERCOMMIT_RATIO,
  type Gpu,
  type GpuUuid,
  type Host,
  type HostId,
} from './inventory.js';
import {
  checkedRatio,
  compareText,
  beats,
  computeFits,
  gateReason,
  modelMatcher,
  needOn,
  placedOn,
  planOf,
  rawPromise,
  rawRoom,
  scoreOn,
  unreachable,
  type Picks,
  type Plan,
} from './placement-rules.js';

export type PlacementPolicy = 'binpack' | 'spread';

/**
 * Case-insensitive substrings of the GPU model name, as people write them ("H100").
 * A GPU matches when it contains any include term (or include is absent or empty)
 * and no exclude term.
 */
export interface GpuModelFilter {
  readonly include?: readonly string[];
  readonly exclude?: readonly string[];
}

export interface PlacementRequest {
  /** What the shard may use on each GPU; the context overhead comes on top. */
  readonly bytesPerGpu: Bytes;
  /** All on one host. */
  readonly gpuCount: number;
  readonly gpuModel?: GpuModelFilter;
  /** Labels the host must carry with exactly these values. */
  readonly hostSelector?: Readonly<Record<string, string>>;
  /** binpack when absent. */
  readonly policy?: PlacementPolicy;
  /**
   * Compute share per GPU (permille, compute-share.ts); absent or 0: none. A GPU takes it only
   * while its placed shares stay ≤ 100% (computeShareFits).
   */
  readonly computeSharePermille?: number;
  /**
   * GUARANTEED when absent. ISOLATED: only GPUs whose host keeps an isolated (MPS) partition,
   * within it; other shares go beside it.
   */
  readonly computeMode?: ComputeMode;
}

export interface PlacementOptions {
  /** For hosts that have not measured their own; DEFAULT_CONTEXT_OVERHEAD_BYTES when absent. */
  readonly defaultOverheadBytes?: Bytes;
  /** For GPUs without their own ratio; DEFAULT_OVERCOMMIT_RATIO when absent. */
  readonly defaultOvercommitRatio?: number;
}

export interface Placed {
  readonly kind: 'placed';
  readonly hostId: HostId;
  /** Ordered by GPU index. */
  readonly gpuUuids: readonly GpuUuid[];
  /** As requested. */
  readonly bytesPerGpu: Bytes;
  /** bytesPerGpu + the host's context overhead: the cap the interposer enforces per GPU. */
  readonly reservedBytesPerGpu: Bytes;
}

export interface GpuFree {
  readonly uuid: GpuUuid;
  readonly index: number;
  readonly model: string;
  readonly freeBytes: Bytes;
  /** When a compute share was asked: what the GPU has left for one in its mode, permille. */
  readonly freeComputePermille?: number;
}

export type NoFitReason =
  | { readonly kind: 'host-offline' }
  | { readonly kind: 'host-cordoned' }
  | { readonly kind: 'host-draining' }
  /** An ISOLATED share was asked and no GPU of the host (that the model filter admits) has a partition. */
  | { readonly kind: 'no-isolated-partition' }
  | {
      readonly kind: 'label-mismatch';
      readonly key: string;
      readonly wanted: string;
      /** null when the host does not carry the label at all. */
      readonly actual: string | null;
    }
  | {
      readonly kind: 'model-excluded';
      /** The distinct models on the host, sorted. */
      readonly models: readonly string[];
      readonly filter: GpuModelFilter;
    }
  | {
      readonly kind: 'not-enough-gpus';
      readonly neededGpus: number;
      /** Per GPU, context overhead included (saturates at MAX_BYTES, which no GPU holds). */
      readonly neededBytesPerGpu: Bytes;
      /** The compute share asked for, when one was: a fitting GPU has room for it too. */
      readonly neededComputePermille?: number;
      /** The share asked for is ISOLATED: the room is in the host's isolated partition. */
      readonly isolatedCompute?: boolean;
      /** How many GPUs on the host have that much free. */
      readonly fittingGpus: number;
      /** GPUs left out by the model filter (absent from `gpus`). */
      readonly excludedByModel: number;
      /** Every GPU the model filter admits, ordered by index. */
      readonly gpus: readonly GpuFree[];
    };

export type NoFitReasonKind = NoFitReason['kind'];

/** describeNoFitReason(reason) renders the reason for people, when it is shown. */
export interface HostNoFit {
  readonly hostId: HostId;
  readonly hostName: string;
  readonly reason: NoFitReason;
}

/** Also the placement preview: one reason per host, ordered by host id. */
export interface NoFit {
  readonly kind: 'no-fit';
  readonly reasons: readonly HostNoFit[];
  readonly message: string;
}

export type PlacementResult = Placed | NoFit;

export type GpuCapacity = Pick<
  Gpu,
  'totalBytes' | 'reservedBytes' | 'overcommitRatio' | 'suspendedBytes' | 'unownedBytes'
>;

export function overcommitRatioOf(
  gpu: GpuCapacity,
  defaultRatio: number = DEFAULT_OVERCOMMIT_RATIO,
): number {
  return checkedRatio(gpu.overcommitRatio ?? defaultRatio);
}

/**
 * What may be reserved on the GPU in all, with nothing suspended there: its memory less what
 * unowned processes hold, and never past floor(totalBytes × ratio).
 */
export function capacityBytes(
  gpu: GpuCapacity,
  defaultRatio: number = DEFAULT_OVERCOMMIT_RATIO,
): Bytes {
  return bytes(
    Math.max(0, Math.min(gpu.totalBytes - (gpu.unownedBytes ?? 0), rawPromise(gpu, defaultRatio))),
  );
}

/** floor(totalBytes × ratio): what the caps of its shards, on it and suspended, may add up to. */
export function promiseBytes(
  gpu: GpuCapacity,
  defaultRatio: number = DEFAULT_OVERCOMMIT_RATIO,
): Bytes {
  return bytes(rawPromise(gpu, defaultRatio));
}

/** What the GPU can still take (rawRoom); 0 when it is already past either bound. */
export function freeBytes(
  gpu: GpuCapacity,
  defaultRatio: number = DEFAULT_OVERCOMMIT_RATIO,
): Bytes {
  return bytes(Math.max(0, rawRoom(gpu, defaultRatio)));
}

/**
 * The capacity rule, alone: whether the GPU can take `size` more reserved bytes. The control
 * plane's conditional update encodes the same two inequalities:
 *   reserved + size ≤ total − unowned   and   reserved + suspended + size ≤ floor(total × ratio)
 */
export function canReserve(
  gpu: GpuCapacity,
  size: Bytes,
  defaultRatio: number = DEFAULT_OVERCOMMIT_RATIO,
): boolean {
  return size <= rawRoom(gpu, defaultRatio);
}

/**
 * Whether a SUSPENDED shard's cap of `size` can come back onto the GPU: only the resident bound,
 * since its cap already counts among the suspended bytes and moves from there to reserved.
 */
export function canResume(gpu: GpuCapacity, size: Bytes): boolean {
  return gpu.reservedBytes + size <= gpu.totalBytes - (gpu.unownedBytes ?? 0);
}

export function contextOverheadOf(
  host: Pick<Host, 'contextOverheadBytes'>,
  defaultOverhead: Bytes = DEFAULT_CONTEXT_OVERHEAD_BYTES,
): Bytes {
  return host.contextOverheadBytes ?? defaultOverhead;
}

/** Whether a GPU model passes the filter; see GpuModelFilter. */
export function matchesGpuModel(model: string, filter: GpuModelFilter = {}): boolean {
  return modelMatcher(filter)(model);
}

const NO_PARTITION: NoFitReason = { kind: 'no-isolated-partition' };

/** Why a host that passed the gate cannot take the shard. */
function capacityReason(host: Host, plan: Plan): NoFitReason {
  const need = needOn(host, plan);
  const isolated = plan.computeMode === 'ISOLATED';
  const withCompute = plan.computeShare > 0 || isolated;
  const gpus: GpuFree[] = [];
  let fittingGpus = 0;
  let partitioned = false;
  for (const gpu of host.gpus) {
    if (!plan.modelMatches(gpu.model)) continue;
    const free = Math.max(0, rawRoom(gpu, plan.defaultRatio)) as Bytes;
    if (free >= need && computeFits(gpu, plan)) fittingGpus++;
    if ((gpu.isolatedPoolPermille ?? 0) > 0) partitioned = true;
    gpus.push({
      uuid: gpu.uuid,
      index: gpu.index,
      model: gpu.model,
      freeBytes: free,
      ...(withCompute ? { freeComputePermille: freeComputePermille(gpu, plan.computeMode) } : {}),
    });
  }
  if (host.gpus.length > 0 && gpus.length === 0) {
    const models = [...new Set(host.gpus.map((gpu) => gpu.model))].sort(compareText);
    return { kind: 'model-excluded', models, filter: plan.filter };
  }
  if (isolated && !partitioned) return NO_PARTITION;
  return {
    kind: 'not-enough-gpus',
    neededGpus: plan.gpuCount,
    neededBytesPerGpu: clampBytes(need),
    ...(withCompute ? { neededComputePermille: plan.computeShare } : {}),
    ...(isolated ? { isolatedCompute: true } : {}),
    fittingGpus,
    excludedByModel: host.gpus.length - gpus.length,
    gpus: gpus.sort((a, b) => a.index - b.index || compareText(a.uuid, b.uuid)),
  };
}

/**
 * Picks a host and GPUs for the request, or explains for every host why it cannot take it.
 * One pass over the fleet; host ids must be unique, nothing else about order matters.
 */
export function place(
  request: PlacementRequest,
  fleet: readonly Host[],
  options: PlacementOptions = {},
): PlacementResult {
  const plan = planOf(request, options);
  const picks: Picks = { gpus: [], free: [], count: 0 };
  let best: { host: Host; hostId: string; score: number } | undefined;
  for (const host of fleet) {
    const score = scoreOn(host, plan, picks);
    if (!Number.isNaN(score) && beats(plan, score, host.id, best)) {
      best = { host, hostId: host.id, score };
    }
  }
  if (best === undefined) return noFit(fleet, plan);
  return placedOn(best.host, plan, picks);
}

function noFit(fleet: readonly Host[], plan: Plan): NoFit {
  const reasons = fleet
    .map((host): HostNoFit => {
      const reason = gateReason(host, plan) ?? capacityReason(host, plan);
      return { hostId: host.id, hostName: host.name, reason };
    })
    .sort((a, b) => compareText(a.hostId, b.hostId));
  return { kind: 'no-fit', reasons, message: summarizeNoFit(plan, reasons) };
}

function countOf(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

function quoted(terms: readonly string[]): string {
  return terms.map((term) => `"${term}"`).join(', ');
}

function describeFilter(filter: GpuModelFilter): string {
  const parts: string[] = [];
  if (filter.include !== undefined && filter.include.length > 0) {
    parts.push(`include ${quoted(filter.include)}`);
  }
  if (filter.exclude !== undefined && filter.exclude.length > 0) {
    parts.push(`exclude ${quoted(filter.exclude)}`);
  }
  return parts.join('; ');
}

/** One host's reason, for people, with sizes formatted. */
export function describeNoFitReason(reason: NoFitReason): string {
  switch (reason.kind) {
    case 'host-offline':
      return 'host is offline';
    case 'host-cordoned':
      return 'host is cordoned: it takes no new shards';
    case 'host-draining':
      return 'host is draining: its shards are being moved off';
    case 'no-isolated-partition':
      return 'host runs no isolated (MPS) partition, which an ISOLATED shard needs';
    case 'label-mismatch':
      return reason.actual === null
        ? `label "${reason.key}" is not set, wanted "${reason.wanted}"`
        : `label "${reason.key}" is "${reason.actual}", wanted "${reason.wanted}"`;
    case 'model-excluded':
      return (
        `no GPU matches the model filter (${describeFilter(reason.filter)}): ` +
        `this host has ${reason.models.join(', ')}`
      );
    case 'not-enough-gpus': {
      const free =
        reason.gpus.length === 0
          ? 'no GPUs'
          : 'free: ' +
            reason.gpus
              .map(
                (gpu) =>
                  `#${gpu.index} ${formatSize(gpu.freeBytes)}` +
                  (gpu.freeComputePermille === undefined
                    ? ''
                    : ` with ${gpu.freeComputePermille / 10}% ` +
                      (reason.isolatedCompute === true ? 'isolated' : 'compute')),
              )
              .join(', ');
      const excluded =
        reason.excludedByModel > 0
          ? `; ${countOf(reason.excludedByModel, 'GPU')} left out by the model filter`
          : '';
      return (
        `needs ${countOf(reason.neededGpus, 'GPU')} with ${formatSize(reason.neededBytesPerGpu)} ` +
        (reason.neededComputePermille === undefined
          ? ''
          : reason.isolatedCompute === true
            ? `and ${reason.neededComputePermille / 10}% of the isolated partition `
            : `and ${reason.neededComputePermille / 10}% of compute unguaranteed `) +
        `free each, has ${reason.fittingGpus} (${free})${excluded}`
      );
    }
    default:
      return unreachable(reason);
  }
}

const TALLY_ORDER: readonly { readonly kind: NoFitReasonKind; readonly words: string }[] = [
  { kind: 'not-enough-gpus', words: 'without enough free GPU memory' },
  { kind: 'no-isolated-partition', words: 'without an isolated (MPS) partition' },
  { kind: 'model-excluded', words: 'without a matching GPU model' },
  { kind: 'label-mismatch', words: 'not matching the host selector' },
  { kind: 'host-offline', words: 'offline' },
  { kind: 'host-cordoned', words: 'cordoned' },
  { kind: 'host-draining', words: 'draining' },
];

/** Names each host when there are few, and counts them by reason when there are many. */
const HOSTS_NAMED_IN_SUMMARY = 3;

function summarizeNoFit(plan: Plan, reasons: readonly HostNoFit[]): string {
  const what =
    `no host can take ${countOf(plan.gpuCount, 'GPU')} × ${formatSize(plan.bytesPerGpu)} ` +
    (plan.computeMode === 'ISOLATED'
      ? `with ${plan.computeShare / 10}% isolated compute each `
      : '') +
    `(plus context overhead per GPU)`;
  if (reasons.length === 0) return `${what}: the fleet has no hosts`;
  if (reasons.length <= HOSTS_NAMED_IN_SUMMARY) {
    const each = reasons.map((r) => `${r.hostName}: ${describeNoFitReason(r.reason)}`);
    return `${what}: ${each.join('; ')}`;
  }
  const tally = TALLY_ORDER.map(({ kind, words }) => {
    const n = reasons.filter((r) => r.reason.kind === kind).length;
    return n === 0 ? '' : `${n} ${words}`;
  }).filter((part) => part !== '');
  return `${what}: of ${countOf(reasons.length, 'host')}, ${tally.join(', ')}`;
}

/**
 * The steps of an admission pass (admission.ts) that decide from what they are given alone:
 * which shards expired, the bound past which nothing more fits, which shards a requeued victim
 * still waits for, whether a team's limit or guarantee keeps a shard waiting, what it is placed
 * as, and why a shard that could not be placed waits. Pure; admission-order.ts applies them in
 * queue order, and admission-pass.ts keeps what a pass has decided so far.
 */
import { bytes, formatSize, type Bytes } from '../sizes.js';
import { DEFAULT_CONTEXT_OVERHEAD_BYTES, type Host } from '../inventory.js';
import type { Placed, PlacementOptions, PlacementRequest } from '../placement.js';
import type { WaitReason } from './admission.js';
import { withinGuaranteeRequest, type Guarantee } from './guarantees.js';
import type { PendingShard, QueueTeam, TeamHolding } from './model.js';

/** Shared by every shard that waits for capacity: a deep queue allocates no reason each. */
export const CAPACITY: WaitReason = Object.freeze({ kind: 'capacity' });

/** The shards whose maxWait passed (sorted by id), and the others. */
export function partitionExpired(
  pending: readonly PendingShard[],
  now: number,
): { expired: string[]; live: PendingShard[] } {
  const expired: string[] = [];
  const live: PendingShard[] = [];
  for (const shard of pending) {
    if (shard.expiresAt !== undefined && shard.expiresAt <= now) expired.push(shard.id);
    else live.push(shard);
  }
  expired.sort();
  return { expired, live };
}

/** The smallest context overhead any GPU of the fleet adds to a shard's bytes. */
export function smallestOverheadOf(fleet: readonly Host[], options: PlacementOptions): number {
  let overhead = options.defaultOverheadBytes ?? DEFAULT_CONTEXT_OVERHEAD_BYTES;
  for (const host of fleet) {
    if (host.contextOverheadBytes !== undefined && host.contextOverheadBytes < overhead) {
      overhead = host.contextOverheadBytes;
    }
  }
  return overhead;
}

/**
 * The per-GPU needs (overhead included) of the shards a pass has not decided yet, as a count
 * per distinct size (a queue has few). Once the smallest is above every GPU's free bytes,
 * nothing more can be placed, so spots no longer matter: the rest only wait (or reclaim).
 * In-pass placements only lower free bytes, so the bound holds for the rest of the pass once
 * it holds. Keeps a pass over a deep queue behind a full fleet linear in the queue, not
 * queue × hosts.
 */
export class NeedsLeft {
  private overhead = 0;
  private first = 0;
  private readonly indexOf = new Map<number, number>();

  private constructor(
    /** Distinct bytesPerGpu, ascending. */
    private readonly sizes: number[],
    private readonly counts: number[],
  ) {
    sizes.forEach((size, i) => this.indexOf.set(size, i));
  }

  /** The needs of these shards. */
  static of(shards: readonly PendingShard[]): NeedsLeft {
    const counts = new Map<number, number>();
    for (const shard of shards) {
      const size = shard.request.bytesPerGpu;
      counts.set(size, (counts.get(size) ?? 0) + 1);
    }
    return NeedsLeft.fromCounts(counts);
  }

  /** From a count of shards per bytesPerGpu (not kept). */
  static fromCounts(counts: ReadonlyMap<number, number>): NeedsLeft {
    const sizes = [...counts.keys()].filter((size) => counts.get(size)! > 0).sort((a, b) => a - b);
    return new NeedsLeft(
      sizes,
      sizes.map((size) => counts.get(size)!),
    );
  }

  /** What every need adds: the smallest overhead of the fleet (smallestOverheadOf). */
  setOverhead(bytes: number): void {
    this.overhead = bytes;
  }

  /** The smallest need left; Infinity when none is. */
  smallest(): number {
    return this.first < this.sizes.length ? this.sizes[this.first]! + this.overhead : Infinity;
  }

  /** A shard of this bytesPerGpu is being decided: its need is no longer left. */
  take(bytesPerGpu: number): void {
    const { sizes, counts } = this;
    const i = this.indexOf.get(bytesPerGpu);
    if (i === undefined || counts[i]! <= 0) {
      throw new RangeError(`no shard of ${bytesPerGpu} bytes per GPU is left to decide`);
    }
    counts[i] = counts[i]! - 1;
    while (this.first < sizes.length && counts[this.first] === 0) this.first++;
  }
}

/**
 * The shards of the queue that some requeued victim in it was reclaimed for. Only those are
 * looked up, so a pass over a deep queue builds no set of every waiting id.
 */
export function reclaimersWaitingIn(queue: readonly PendingShard[]): Set<string> {
  const targets = new Set<string>();
  for (const shard of queue) {
    if (shard.reclaimedFor !== undefined) targets.add(shard.reclaimedFor);
  }
  const waiting = new Set<string>();
  if (targets.size > 0) {
    for (const shard of queue) if (targets.has(shard.id)) waiting.add(shard.id);
  }
  return waiting;
}

/**
 * A shard that, once nothing fits anywhere and no idle shard can be suspended, can do nothing
 * but wait for capacity: preemptible (no guarantee wait), neither resuming, requeued for another
 * shard nor reclaiming, of a team that only waits too (teamOnlyWaits).
 */
export function shardOnlyWaits(shard: PendingShard): boolean {
  return (
    shard.preemptible &&
    shard.resume === undefined &&
    shard.reclaimedFor === undefined &&
    shard.reclaimInFlight !== true
  );
}

/** A team with no limit (no quota wait) and no guarantee (no reclaim); undefined: unknown. */
export function teamOnlyWaits(team: QueueTeam | undefined): boolean {
  return (
    team === undefined ||
    (team.guarantee.bytes <= 0 && team.maxShards === undefined && team.maxTotalBytes === undefined)
  );
}

/** Why the team's limit (maxShards, then maxTotalBytes) keeps the shard waiting, if it does. */
export function quotaWait(
  team: QueueTeam | undefined,
  holding: TeamHolding,
  need: Bytes,
): WaitReason | undefined {
  if (team?.maxShards !== undefined && holding.shards + 1 > team.maxShards) {
    return {
      kind: 'quota',
      message: `team holds ${holding.shards} shards, its limit is ${team.maxShards}`,
    };
  }
  if (team?.maxTotalBytes !== undefined && holding.bytes + need > team.maxTotalBytes) {
    return {
      kind: 'quota',
      message:
        `team holds ${formatSize(bytes(holding.bytes))} + ${formatSize(need)} ` +
        `> its limit ${formatSize(team.maxTotalBytes)}`,
    };
  }
  return undefined;
}

/** Where the shard stands against its team's guarantee. */
export interface GuaranteeStanding {
  /** The team stays within its guarantee with this shard, on GPUs the guarantee covers. */
  readonly within: boolean;
  /** The request limited to the GPUs the guarantee covers; undefined when it asks for others. */
  readonly narrowed: PlacementRequest | undefined;
}

export function guaranteeStanding(
  shard: PendingShard,
  guarantee: Guarantee,
  coveredBytes: number,
  need: Bytes,
): GuaranteeStanding {
  const narrowed = withinGuaranteeRequest(shard.request, guarantee.gpuModel);
  const within =
    guarantee.bytes > 0 && narrowed !== undefined && coveredBytes + need <= guarantee.bytes;
  return { within, narrowed };
}

/** Why a non-preemptible shard beyond its team's guarantee waits. */
export function nonPreemptibleWait(guarantee: Guarantee, need: Bytes): WaitReason {
  return {
    kind: 'guarantee',
    message:
      `a non-preemptible shard runs only within its team's guarantee ` +
      `(${formatSize(guarantee.bytes)}${guarantee.gpuModel ? ` on "${guarantee.gpuModel}"` : ''}), ` +
      `which ${formatSize(need)} more would pass`,
  };
}

/** A non-preemptible shard is placed only on GPUs its guarantee covers. */
export function requestToPlace(shard: PendingShard, standing: GuaranteeStanding): PlacementRequest {
  return !shard.preemptible && standing.narrowed !== undefined ? standing.narrowed : shard.request;
}

/**
 * Why a shard that could not be placed waits: nowhere fits now, or the room that fits now is
 * kept for a shard ahead of it (the first whose spot is on the host it would take now).
 */
export function behindWhom(
  fitsNow: Placed | undefined,
  owners: ReadonlyMap<string, readonly string[]>,
  self: string,
): WaitReason {
  if (fitsNow === undefined) return CAPACITY;
  const first = owners.get(fitsNow.hostId)?.find((id) => id !== self);
  if (first !== undefined) return { kind: 'behind', shardId: first };
  for (const list of owners.values()) {
    const other = list.find((id) => id !== self);
    if (other !== undefined) return { kind: 'behind', shardId: other };
  }
  return CAPACITY;
}

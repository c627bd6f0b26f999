/**
 * The steps of an admission pass (admission.ts) that decide from what they are given alone:
 * which shards expired, the bound past which nothing more fits, which shards a requeued victim
 * still waits for, whether a team's limit or guarantee keeps a shard waiting, what it is placed
 * as, and why a shard that could not be placed waits. Pure; admission.ts keeps what a pass has
 * decided so far and applies them in queue order.
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

/**
 * Per queue position, the smallest per-GPU need (overhead included) from there to the end.
 * Past the point where it is above every GPU's free bytes, nothing more can be placed, so
 * spots no longer matter: the rest only wait (or reclaim). In-pass placements only lower free
 * bytes, so the bound holds for the rest of the pass once it holds. Keeps a pass over a deep
 * queue behind a full fleet linear in the queue, not queue × hosts.
 */
export function smallestNeedsFrom(
  queue: readonly PendingShard[],
  fleet: readonly Host[],
  options: PlacementOptions,
): number[] {
  const minOverhead = Math.min(
    options.defaultOverheadBytes ?? DEFAULT_CONTEXT_OVERHEAD_BYTES,
    ...fleet.map((host) => host.contextOverheadBytes ?? Infinity),
  );
  const smallestFrom = new Array<number>(queue.length + 1).fill(Infinity);
  for (let i = queue.length - 1; i >= 0; i--) {
    smallestFrom[i] = Math.min(queue[i]!.request.bytesPerGpu + minOverhead, smallestFrom[i + 1]!);
  }
  return smallestFrom;
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

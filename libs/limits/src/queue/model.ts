/**
 * What the queue decisions read: teams, the shards that hold capacity, the shards that wait.
 * All plain data; times are ms since the epoch.
 */
import type { Bytes } from '../sizes.js';
import type { GpuUuid, HostId } from '../inventory.js';
import type { PlacementRequest } from '../placement.js';
import { compareText } from '../placement-rules.js';
import { compareFairShare, fairShareKey, type FairShareKey } from './fair-share.js';
import { guaranteeCovers, type Guarantee } from './guarantees.js';

export interface QueueTeam {
  readonly id: string;
  readonly guarantee: Guarantee;
  /** The team's limit on requested bytes held at once (quota maxTotalBytes); absent = none. */
  readonly maxTotalBytes?: Bytes;
  /** The team's limit on shards held at once; absent = none. */
  readonly maxShards?: number;
  /** Decayed GiB-hours (see fair-share.ts). */
  readonly decayedGiBHours: number;
}

/** A shard that holds a reservation (placed, starting, running, stopping). */
export interface HeldShard {
  readonly id: string;
  readonly teamId: string;
  readonly hostId: HostId;
  readonly gpuUuids: readonly GpuUuid[];
  /** What each of its GPUs' reservedBytes includes for it (context overhead included). */
  readonly reservedBytesPerGpu: Bytes;
  /** bytesPerGpu × gpuCount: what its team's quota and guarantee count. */
  readonly quotaBytes: Bytes;
  /** The model of its GPUs. */
  readonly gpuModel: string;
  readonly priorityRank: number;
  readonly preemptible: boolean;
  /** When it was placed; the youngest is preempted first among equals. */
  readonly placedAt: number;
  /** Already on its way out (stopping, suspending, or chosen as a victim): never chosen again. */
  readonly leaving: boolean;
  /** A leaving shard reclaimed for a pending shard (or suspended to make room for it): its id. */
  readonly reclaimFor?: string;
  /**
   * Elastic (docs/elastic.md): it asked to be and its team allows it, so the queue may suspend it
   * (its memory to host RAM) instead of stopping it, or to make room while it is idle.
   */
  readonly elastic?: boolean;
  /** When its idle time began (its last kernel, else its start); absent: busy or unknown. */
  readonly idleSince?: number;
  /** A leaving shard whose memory goes to host RAM (SUSPENDING): its cap stays promised. */
  readonly suspending?: boolean;
}

/** A SUSPENDED shard: holds no GPU, but its quota and its cap on its own GPUs. */
export interface SuspendedShard {
  readonly id: string;
  readonly teamId: string;
  readonly hostId: HostId;
  readonly gpuUuids: readonly GpuUuid[];
  /** Its cap on each of its GPUs (what each GPU's reservedBytes takes back when it resumes). */
  readonly reservedBytesPerGpu: Bytes;
  /** bytesPerGpu × gpuCount: what its team's quota counts. */
  readonly quotaBytes: Bytes;
}

export interface PendingShard {
  readonly id: string;
  readonly teamId: string;
  readonly request: PlacementRequest;
  readonly priorityRank: number;
  readonly preemptible: boolean;
  /** When it started waiting (requeued shards keep their first arrival). */
  readonly arrivedAt: number;
  /** It ends as EXPIRED when this passes; absent = waits as long as it takes. */
  readonly expiresAt?: number;
  /** Victims are already stopping for it: no second reclaim. */
  readonly reclaimInFlight?: boolean;
  /**
   * It was stopped (requeued) to make room for this pending shard: it is not placed while that
   * one waits, or it would take back the room and be reclaimed again, in turn.
   */
  readonly reclaimedFor?: string;
  /**
   * A SUSPENDED shard whose resume is wanted (a wake, its owner, or room back after a reclaim):
   * it comes back only to its own GPUs, needing its cap on each of them, with no quota check
   * (its quota is already counted). `arrivedAt` is when the resume was wanted.
   */
  readonly resume?: SuspendedShard;
}

export function fairShareOf(team: QueueTeam | undefined): FairShareKey {
  return team === undefined
    ? { ratio: Infinity, decayedGiBHours: Infinity }
    : fairShareKey(team.decayedGiBHours, team.guarantee.bytes);
}

/**
 * The queue order: higher priority class first, then the team that used least relative to
 * its guarantee, then earlier arrival, then the smaller id (so equal input gives equal order).
 */
export function compareQueued(
  a: PendingShard,
  b: PendingShard,
  teams: ReadonlyMap<string, QueueTeam>,
): number {
  if (a.priorityRank !== b.priorityRank) return b.priorityRank - a.priorityRank;
  if (a.teamId !== b.teamId) {
    const byShare = compareFairShare(
      fairShareOf(teams.get(a.teamId)),
      fairShareOf(teams.get(b.teamId)),
    );
    if (byShare !== 0) return byShare;
  }
  if (a.arrivedAt !== b.arrivedAt) return a.arrivedAt - b.arrivedAt;
  return compareText(a.id, b.id);
}

export function teamsById(teams: readonly QueueTeam[]): Map<string, QueueTeam> {
  const map = new Map<string, QueueTeam>();
  for (const team of teams) {
    if (map.has(team.id)) throw new RangeError(`team ${team.id} is listed twice`);
    map.set(team.id, team);
  }
  return map;
}

/** A copy of the pending shards in queue order. */
export function queueOrder(
  pending: readonly PendingShard[],
  teams: readonly QueueTeam[],
): PendingShard[] {
  const byId = teamsById(teams);
  return [...pending].sort((a, b) => compareQueued(a, b, byId));
}

/** What a team holds: all of it, and the part on GPUs its guarantee covers. */
export interface TeamHolding {
  bytes: number;
  shards: number;
  /** On GPUs the guarantee covers; leaving shards excluded. */
  guaranteedModelBytes: number;
}

export function holdingsOf(
  held: readonly HeldShard[],
  teams: ReadonlyMap<string, QueueTeam>,
  suspended: readonly SuspendedShard[] = [],
): Map<string, TeamHolding> {
  const map = new Map<string, TeamHolding>();
  const holdingOf = (teamId: string): TeamHolding => {
    let holding = map.get(teamId);
    if (holding === undefined) {
      holding = { bytes: 0, shards: 0, guaranteedModelBytes: 0 };
      map.set(teamId, holding);
    }
    return holding;
  };
  // A suspended shard's quota is its team's (it comes back), though it holds no GPU.
  for (const shard of suspended) {
    const holding = holdingOf(shard.teamId);
    holding.bytes += shard.quotaBytes;
    holding.shards += 1;
  }
  for (const shard of held) {
    const holding = holdingOf(shard.teamId);
    holding.bytes += shard.quotaBytes;
    holding.shards += 1;
    const team = teams.get(shard.teamId);
    if (!shard.leaving && team !== undefined && guaranteeCovers(team.guarantee, shard.gpuModel)) {
      holding.guaranteedModelBytes += shard.quotaBytes;
    }
  }
  return map;
}

/** Bytes a team holds above its guarantee (on the GPUs the guarantee covers, and all others). */
export function borrowedBytesOf(team: QueueTeam, held: readonly HeldShard[]): number {
  let covered = 0;
  let uncovered = 0;
  for (const shard of held) {
    if (shard.teamId !== team.id) continue;
    if (guaranteeCovers(team.guarantee, shard.gpuModel)) covered += shard.quotaBytes;
    else uncovered += shard.quotaBytes;
  }
  return Math.max(0, covered - team.guarantee.bytes) + uncovered;
}

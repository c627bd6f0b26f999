/**
 * The admission pass: given the fleet, the shards that hold capacity, the queue and the teams,
 * which pending shards are placed now, which expire, which borrowed shards are stopped to keep a
 * guarantee, and why each of the others waits. Pure; the control plane applies the plan in one
 * conditional transaction and runs a pass on every event that frees capacity.
 *
 * Order: see compareQueued (priority class, fair share, arrival, id). Shards are taken in that
 * order; each is placed if the team's limit allows it and it fits without touching room kept
 * for a shard ahead of it.
 *
 * Backfill: a shard that cannot be placed keeps room ("its spot") in the shadow fleet, the
 * fleet as it will be once every shard that holds capacity now has ended, but with what this
 * pass placed and the spots of the shards ahead of it still there. A shard further back is
 * placed only where it fits both the fleet as it is and beside every spot kept ahead of it:
 * per GPU, in-pass placements + max(held now, spots) + its need ≤ capacity. So nothing placed
 * behind a waiting shard ever stands in its spot: the waiting shard starts on its spot no
 * later than it would have without the backfill (when the shards held there now end). It may
 * start earlier elsewhere if another host frees first; nothing behind it is kept from that
 * host, since without run-time estimates no later start can be promised. A shard that cannot
 * fit even in the shadow fleet keeps no spot (it waits for room that shards ahead leave).
 *
 * Guarantees: a shard whose team stays within its guarantee with it ("within guarantee") that
 * cannot be placed reclaims: borrowed shards are chosen as victims (see reclaim.ts) and stopped
 * by the control plane; the shard keeps the room they free as its spot and is placed by a later
 * pass once they are gone. While some of them are still stopping, the room the others already
 * freed is promised to it: its spot (where it fits once its victims still held are gone) counts
 * as taken in every view, so no shard behind it (a victim requeued behind it included) is
 * placed there; otherwise the freed room goes to a shard behind, the shard reclaims again, and
 * the two stop each other in turn. For the same reason a requeued victim is not placed while
 * a higher class than the shard within its guarantee). (If its victims no longer free enough
 * for it, a shard ahead took the room: it keeps no spot and reclaims again once they are gone.)
 * A shard of a non-preemptible class is admitted only within its team's guarantee (it must
 * never need to be preempted, so it may not borrow).
 *
 * Where each part is:
 * - this file: what a pass is given and what it decides (the types), and admit();
 * - admission-order.ts: the order in which a pass decides the shards, and each shard's steps;
 * - admission-steps.ts: the steps that decide from what they are given alone (expired, limits,
 *   guarantee, what a shard is placed as, why it waits);
 * - admission-freeing.ts: room freed for a waiting shard (idle shards suspended, borrowed ones
 *   reclaimed) and the room promised to it while they leave;
 * - admission-pass.ts: what a pass has decided so far, and what each decision changes for the
 *   shards after it;
 * - admission-room.ts: what is held, placed, kept and promised per GPU, and the views of the
 *   fleet built from it (room-after-victims.ts: the room leaving shards free).
 */
import type { Placed, PlacementOptions } from '../placement.js';
import type { Host } from '../inventory.js';
import type { RoomIndex } from '../room-index.js';
import { decideInOrder } from './admission-order.js';
import { NeedsLeft, partitionExpired, reclaimersWaitingIn } from './admission-steps.js';
import {
  compareQueued,
  teamsById,
  type HeldShard,
  type PendingShard,
  type QueueTeam,
  type SuspendedShard,
} from './model.js';

export interface AdmissionInput {
  /** Every host, with reservedBytes as held now (held shards included). */
  readonly fleet: readonly Host[];
  /** Shards that hold capacity now. */
  readonly held: readonly HeldShard[];
  /** Pending shards, and SUSPENDED ones whose resume is wanted (`resume` set). */
  readonly pending: readonly PendingShard[];
  /** Every SUSPENDED shard (their quota is still their teams'); absent: none. */
  readonly suspended?: readonly SuspendedShard[];
  readonly teams: readonly QueueTeam[];
  readonly now: number;
  readonly options?: PlacementOptions;
  /**
   * An index of `fleet` (its very host objects, told of every change since: RoomIndex's
   * contract) that says which hosts may have room: the pass starts from those instead of
   * looking at every GPU. Absent: it looks at every GPU. admitWholePass never asks it.
   */
  readonly roomIndex?: Pick<RoomIndex, 'hostsThatMayFit'>;
}

export type WaitReason =
  /** Fits nowhere now. */
  | { readonly kind: 'capacity' }
  /** Would fit now, but only in room kept for a shard ahead of it. */
  | { readonly kind: 'behind'; readonly shardId: string }
  /** Its team's limit (maxTotalBytes or maxShards) is reached. */
  | { readonly kind: 'quota'; readonly message: string }
  /** Non-preemptible class beyond its team's guarantee. */
  | { readonly kind: 'guarantee'; readonly message: string }
  /** Borrowed shards are being stopped (or suspended) for it. */
  | { readonly kind: 'reclaiming'; readonly victimIds: readonly string[] }
  /** Idle elastic shards are being suspended to make room for it. */
  | { readonly kind: 'suspending'; readonly victimIds: readonly string[] }
  /** It was reclaimed for this shard, which still waits. */
  | { readonly kind: 'reclaimed'; readonly shardId: string };

export interface Placement {
  readonly shardId: string;
  readonly placed: Placed;
  /** Within its team's guarantee when placed (never preempted while the team stays within it). */
  readonly guaranteed: boolean;
}

export interface Preemption {
  readonly victimId: string;
  readonly victimTeamId: string;
  readonly forShardId: string;
  readonly hostId: string;
}

/**
 * A running elastic shard whose memory goes to host RAM (RUNNING → SUSPENDING): idle, to make
 * room for a waiting shard, or a reclaim's victim that can be suspended instead of stopped
 * (once SUSPENDED, its resume is wanted, so it comes back when room does).
 */
export interface Suspension {
  readonly shardId: string;
  readonly teamId: string;
  readonly hostId: string;
  readonly cause: 'make-room' | 'reclaim';
  readonly forShardId: string;
}

/** A SUSPENDED shard taking its cap back on its own GPUs (SUSPENDED → RESUMING). */
export interface Resume {
  readonly shardId: string;
  readonly placed: Placed;
}

/**
 * A shard that still waits. Its position is its place in the plan's `waiting` (index + 1): not
 * stored, so that a shard that only waits for capacity keeps one entry from pass to pass
 * (AdmissionQueue) while the shards ahead of it are placed.
 */
export interface Waiting {
  readonly shardId: string;
  readonly reason: WaitReason;
  /** Where it is expected to go (its spot), when it keeps one. */
  readonly spot?: Placed;
}

export interface AdmissionPlan {
  /** In the order they were decided (queue order). */
  readonly placements: readonly Placement[];
  readonly preemptions: readonly Preemption[];
  /** In the order they were decided. */
  readonly suspensions: readonly Suspension[];
  /** In queue order. */
  readonly resumes: readonly Resume[];
  /** maxWait passed: these end as EXPIRED. Sorted by id. */
  readonly expired: readonly string[];
  /** In queue order: the i-th waits at position i + 1 among the shards still waiting. */
  readonly waiting: readonly Waiting[];
}

/**
 * The pass: expired shards are set aside, the rest taken in queue order, and each decided in
 * turn against what the shards ahead of it left (decideOne, admission-order.ts).
 */
export function admit(input: AdmissionInput): AdmissionPlan {
  return runPass(input, false);
}

/**
 * admit() the long way, every shard through every step: make-room asks every host, and no
 * shard is known to wait for capacity before each step has said so. The same plan as admit()
 * (the property tests hold them to it on random queues and freeing events); kept as the
 * reference for the shortcuts that keep admit() cheap on a deep queue.
 */
export function admitWholePass(input: AdmissionInput): AdmissionPlan {
  return runPass(input, true);
}

function runPass(input: AdmissionInput, whole: boolean): AdmissionPlan {
  const teams = teamsById(input.teams);
  const { expired, live } = partitionExpired(input.pending, input.now);
  const queue = live.sort((a, b) => compareQueued(a, b, teams));
  return decideInOrder(
    input,
    teams,
    {
      shards: queue,
      needs: NeedsLeft.of(queue),
      reclaimersWaiting: reclaimersWaitingIn(queue),
      resumeHosts: resumeHostsOf(queue),
    },
    expired,
    whole,
  );
}

function resumeHostsOf(queue: readonly PendingShard[]): Set<string> {
  const hosts = new Set<string>();
  for (const shard of queue) if (shard.resume !== undefined) hosts.add(shard.resume.hostId);
  return hosts;
}

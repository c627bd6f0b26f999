/**
 * The order of an admission pass (admission.ts) and each shard's steps in it: the shards are
 * decided one by one in queue order, each against what the shards ahead of it left, until
 * nothing fits and nothing can be suspended; from there on a shard that can only wait for
 * capacity waits without a decision.
 */
import type { PlacementRequest } from '../placement.js';
import { quotaBytesOf } from '../quota.js';
import type { AdmissionInput, AdmissionPlan, Waiting, WaitReason } from './admission.js';
import { makeRoom, reclaim, waitOnPromisedRoom } from './admission-freeing.js';
import { openPass, recordPlacement, wait, type Pass } from './admission-pass.js';
import {
  behindWhom,
  CAPACITY,
  guaranteeStanding,
  nonPreemptibleWait,
  quotaWait,
  requestToPlace,
  shardOnlyWaits,
  teamOnlyWaits,
  type NeedsLeft,
} from './admission-steps.js';
import { NO_GUARANTEE } from './guarantees.js';
import type { PendingShard, QueueTeam, SuspendedShard, TeamHolding } from './model.js';

/**
 * A queue in queue order, expired shards left out, with what a pass needs to know of all of it
 * before it starts (admit() works it out from the list; AdmissionQueue keeps it between passes).
 */
export interface OrderedQueue {
  readonly shards: readonly PendingShard[];
  /** The per-GPU needs of `shards` (NeedsLeft.of(shards)); the pass uses it up. */
  readonly needs: NeedsLeft;
  /** reclaimersWaitingIn(shards). */
  readonly reclaimersWaiting: Set<string>;
  /** The hosts of the shards that want to resume. */
  readonly resumeHosts: ReadonlySet<string>;
  /**
   * Per shard of `shards`, its entry in `waiting` when it waits for capacity; given only when
   * no shard of `shards` does more than wait once nothing fits (see onlyWaitsForCapacity): then
   * the end of the queue is this list's end, copied, not decided shard by shard.
   */
  readonly capacityWaits?: readonly Waiting[];
}

/**
 * The pass over a queue already in order (runPass, AdmissionQueue.admit): each shard decided in
 * turn against what the shards ahead of it left (decideOne), until nothing fits and no idle
 * shard can be suspended; from there on, a shard that can only wait for capacity waits with
 * no decision (and with `capacityWaits`, all of them at once).
 */
export function decideInOrder(
  input: Omit<AdmissionInput, 'pending'>,
  teams: ReadonlyMap<string, QueueTeam>,
  queue: OrderedQueue,
  expired: string[],
  whole: boolean,
): AdmissionPlan {
  const pass = openPass(input, teams, queue, whole);
  const { shards } = queue;
  let position = 0;
  for (; position < shards.length; position++) {
    const shard = shards[position]!;
    if (!pass.full && pass.needs.smallest() > pass.room.largestFreeNow()) pass.full = true;
    if (!whole && pass.full && pass.suspendable.size === 0) break;
    pass.needs.take(shard.request.bytesPerGpu);
    decideOne(pass, shard);
  }
  // Nothing fits any more and nothing can be suspended: both stay so for the rest of the pass.
  let waiting: readonly Waiting[] = pass.waiting;
  if (position < shards.length && queue.capacityWaits !== undefined) {
    waiting = pass.waiting.concat(queue.capacityWaits.slice(position));
  } else {
    for (; position < shards.length; position++) {
      const shard = shards[position]!;
      if (onlyWaitsForCapacity(pass, shard)) wait(pass, shard, CAPACITY);
      else decideOne(pass, shard);
    }
  }
  return {
    placements: pass.placements,
    preemptions: pass.preemptions,
    suspensions: pass.suspensions,
    resumes: pass.resumes,
    expired,
    waiting,
  };
}

/**
 * One shard, in this order: it waits while the shard it was reclaimed for waits, or when its
 * team's limit or (non-preemptible) guarantee does not allow it; else it is placed where it
 * fits beside the room kept ahead of it; else idle shards are suspended for it, or, within its
 * guarantee, it reclaims; else, with a reclaim in flight, it waits on the room promised to it;
 * else it waits, keeping a spot.
 */
function decideOne(pass: Pass, shard: PendingShard): void {
  if (shard.resume !== undefined) {
    decideResume(pass, shard, shard.resume);
    return;
  }
  if (shard.reclaimedFor !== undefined && pass.reclaimersWaiting.has(shard.reclaimedFor)) {
    wait(pass, shard, { kind: 'reclaimed', shardId: shard.reclaimedFor });
    return;
  }
  const team = pass.teams.get(shard.teamId);
  const guarantee = team?.guarantee ?? NO_GUARANTEE;
  const need = quotaBytesOf(shard.request);
  const holding = holdingOf(pass, shard.teamId);
  const overLimit = quotaWait(team, holding, need);
  if (overLimit !== undefined) {
    wait(pass, shard, overLimit);
    return;
  }
  const standing = guaranteeStanding(shard, guarantee, pass.covered.get(shard.teamId) ?? 0, need);
  if (!shard.preemptible && !standing.within) {
    wait(pass, shard, nonPreemptibleWait(guarantee, need));
    return;
  }
  const request = requestToPlace(shard, standing);
  const placed = pass.full ? undefined : pass.room.placeBesideSpots(request);
  if (placed !== undefined) {
    recordPlacement(pass, shard, placed, { holding, guarantee, need, within: standing.within });
    return;
  }
  const roomComing = shard.reclaimInFlight
    ? waitOnPromisedRoom(pass, shard, request, 'reclaiming')
    : makeRoom(pass, shard, { request }) || (standing.within && reclaim(pass, shard, guarantee));
  if (!roomComing) waitForRoom(pass, shard, request);
}

/** What the team holds so far in this pass (nothing yet when it holds nothing). */
function holdingOf(pass: Pass, teamId: string): TeamHolding {
  return pass.holdings.get(teamId) ?? { bytes: 0, shards: 0, guaranteedModelBytes: 0 };
}

/**
 * Once nothing fits anywhere and no idle shard can be suspended, the deep end of a queue is
 * mostly shards that can do nothing but wait for capacity: preemptible (no guarantee wait),
 * of a team with no limit (no quota wait) and no guarantee (no reclaim), neither requeued for
 * another shard nor reclaiming. decideOne would find CAPACITY for them the long way; this
 * finds it with one lookup, so a pass over 10,000 of them costs little more than its list.
 */
function onlyWaitsForCapacity(pass: Pass, shard: PendingShard): boolean {
  return shardOnlyWaits(shard) && teamOnlyWaits(pass.teams.get(shard.teamId));
}

/**
 * A SUSPENDED shard whose resume is wanted: it comes back to its own GPUs when they have room
 * beside the spots kept ahead of it (the fleet's "full" bound is not asked: a resume needs no
 * room in the oversubscription ratio, its cap is already there), else idle elastic shards of
 * its host are suspended for it, else it waits. It never reclaims.
 */
function decideResume(pass: Pass, shard: PendingShard, resume: SuspendedShard): void {
  const placed = pass.room.placePinned(resume);
  if (placed !== undefined) {
    pass.room.recordPlacement(placed, shard.request);
    pass.resumes.push({ shardId: shard.id, placed });
    return;
  }
  const roomComing = shard.reclaimInFlight
    ? waitOnPromisedRoom(pass, shard, shard.request, 'suspending', resume)
    : makeRoom(pass, shard, { request: shard.request, resume });
  if (!roomComing) wait(pass, shard, CAPACITY);
}

/**
 * The shard waits for room, keeping a spot in the shadow fleet where it has one. A shard whose
 * victims no longer free enough for it keeps no spot: it reclaims again once they are gone.
 */
function waitForRoom(pass: Pass, shard: PendingShard, request: PlacementRequest): void {
  const spot =
    pass.full || shard.reclaimInFlight ? undefined : pass.room.spotInShadowFleet(request);
  if (spot !== undefined) pass.room.keepSpot(shard.id, spot);
  const reason: WaitReason = shard.reclaimInFlight
    ? { kind: 'reclaiming', victimIds: [] }
    : pass.full
      ? CAPACITY
      : behindWhom(pass.room.fitsIfNoRoomWereKept(request), pass.room.spotOwners, shard.id);
  wait(pass, shard, reason, spot);
}

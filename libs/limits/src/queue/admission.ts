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
 * the shard it was reclaimed for still waits (it may come first in the queue order: a victim of
 * a higher class than the shard within its guarantee). (If its victims no longer free enough for it, a shard ahead
 * took the room: it keeps no spot and reclaims again once they are gone.) A shard of a non-preemptible class is admitted only within its
 * team's guarantee (it must never need to be preempted, so it may not borrow).
 *
 * What is held, placed, kept and promised per GPU, and the views of the fleet built from it,
 * are kept by `AdmissionRoom` (admission-room.ts); the steps that decide from what they are
 * given alone (limits, guarantee, why a shard waits) are in admission-steps.ts; this file is
 * the order in which a pass applies them and what each decision changes for the shards after.
 */
import type { Placed, PlacementOptions, PlacementRequest } from '../placement.js';
import { quotaBytesOf } from '../quota.js';
import type { Bytes } from '../sizes.js';
import type { Host } from '../inventory.js';
import { AdmissionRoom, promisedRoom } from './admission-room.js';
import {
  behindWhom,
  CAPACITY,
  guaranteeStanding,
  nonPreemptibleWait,
  partitionExpired,
  quotaWait,
  reclaimersWaitingIn,
  requestToPlace,
  smallestNeedsFrom,
} from './admission-steps.js';
import { guaranteeCovers, NO_GUARANTEE, type Guarantee } from './guarantees.js';
import {
  compareQueued,
  holdingsOf,
  teamsById,
  type HeldShard,
  type PendingShard,
  type QueueTeam,
  type TeamHolding,
} from './model.js';
import { chooseVictims, type ReclaimResult } from './reclaim.js';

export interface AdmissionInput {
  /** Every host, with reservedBytes as held now (held shards included). */
  readonly fleet: readonly Host[];
  /** Shards that hold capacity now. */
  readonly held: readonly HeldShard[];
  readonly pending: readonly PendingShard[];
  readonly teams: readonly QueueTeam[];
  readonly now: number;
  readonly options?: PlacementOptions;
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
  /** Borrowed shards are being stopped for it. */
  | { readonly kind: 'reclaiming'; readonly victimIds: readonly string[] }
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

export interface Waiting {
  readonly shardId: string;
  /** 1-based, among the shards still waiting, in queue order. */
  readonly position: number;
  readonly reason: WaitReason;
  /** Where it is expected to go (its spot), when it keeps one. */
  readonly spot?: Placed;
}

export interface AdmissionPlan {
  /** In the order they were decided (queue order). */
  readonly placements: readonly Placement[];
  readonly preemptions: readonly Preemption[];
  /** maxWait passed: these end as EXPIRED. Sorted by id. */
  readonly expired: readonly string[];
  /** In queue order. */
  readonly waiting: readonly Waiting[];
}

/**
 * The pass: expired shards are set aside, the rest taken in queue order, and each decided in
 * turn against what the shards ahead of it left (decideOne).
 */
export function admit(input: AdmissionInput): AdmissionPlan {
  const teams = teamsById(input.teams);
  const { expired, live } = partitionExpired(input.pending, input.now);
  const queue = live.sort((a, b) => compareQueued(a, b, teams));
  const pass = openPass(input, teams, queue);
  for (let position = 0; position < queue.length; position++) {
    decideOne(pass, queue[position]!, position);
  }
  return {
    placements: pass.placements,
    preemptions: pass.preemptions,
    expired,
    waiting: pass.waiting,
  };
}

/** What one pass reads and has decided so far; each decision reads what those ahead left. */
interface Pass {
  readonly teams: ReadonlyMap<string, QueueTeam>;
  /** Every shard that holds capacity now, leaving ones included. */
  readonly held: readonly HeldShard[];
  readonly options: PlacementOptions;
  readonly room: AdmissionRoom;
  /** Per queue position, the smallest per-GPU need from there to the end (smallestNeedsFrom). */
  readonly smallestNeedFrom: readonly number[];
  /** Once true, no shard left fits anywhere now: the rest only wait (or reclaim). */
  full: boolean;
  /** Per team: what it holds, with this pass's placements. */
  readonly holdings: Map<string, TeamHolding>;
  /** Per team: bytes on GPUs its guarantee covers, placements in and victims out. */
  readonly covered: Map<string, number>;
  /** Shards that hold capacity and are not leaving: who a reclaim may choose. */
  stayingHeld: readonly HeldShard[];
  /** Shards a requeued victim was reclaimed for, while they still wait in this pass. */
  readonly reclaimersWaiting: Set<string>;
  readonly placements: Placement[];
  readonly preemptions: Preemption[];
  readonly waiting: Waiting[];
}

function openPass(
  input: AdmissionInput,
  teams: ReadonlyMap<string, QueueTeam>,
  queue: readonly PendingShard[],
): Pass {
  const { fleet, held, options = {} } = input;
  const holdings = holdingsOf(held, teams);
  const covered = new Map<string, number>();
  for (const [teamId, holding] of holdings) covered.set(teamId, holding.guaranteedModelBytes);
  const smallestNeedFrom = smallestNeedsFrom(queue, fleet, options);
  return {
    teams,
    held,
    options,
    room: new AdmissionRoom(fleet, smallestNeedFrom[0]!, options),
    smallestNeedFrom,
    full: false,
    holdings,
    covered,
    stayingHeld: held.filter((s) => !s.leaving),
    reclaimersWaiting: reclaimersWaitingIn(queue),
    placements: [],
    preemptions: [],
    waiting: [],
  };
}

/**
 * One shard, in this order: it waits while the shard it was reclaimed for waits, or when its
 * team's limit or (non-preemptible) guarantee does not allow it; else it is placed where it
 * fits beside the room kept ahead of it; else, within its guarantee, it reclaims; else, with a
 * reclaim in flight, it waits on the room promised to it; else it waits, keeping a spot.
 */
function decideOne(pass: Pass, shard: PendingShard, position: number): void {
  if (!pass.full && pass.smallestNeedFrom[position]! > pass.room.largestFreeNow()) pass.full = true;
  if (shard.reclaimedFor !== undefined && pass.reclaimersWaiting.has(shard.reclaimedFor)) {
    wait(pass, shard, { kind: 'reclaimed', shardId: shard.reclaimedFor });
    return;
  }
  const team = pass.teams.get(shard.teamId);
  const guarantee = team?.guarantee ?? NO_GUARANTEE;
  const need = quotaBytesOf(shard.request);
  const holding = pass.holdings.get(shard.teamId) ?? {
    bytes: 0,
    shards: 0,
    guaranteedModelBytes: 0,
  };
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
  if (standing.within && !shard.reclaimInFlight) {
    const result = chooseVictims(
      { request: shard.request, teamId: shard.teamId, guarantee },
      {
        fleet: pass.room.fleetNow(),
        held: pass.stayingHeld,
        teams: pass.teams,
        coveredBytes: pass.covered,
        options: pass.options,
      },
    );
    if (result.kind === 'reclaim') {
      recordReclaim(pass, shard, result);
      return;
    }
  }
  if (shard.reclaimInFlight) {
    const promisedTo = promisedRoom(
      shard.id,
      request,
      pass.room.fleetNow(),
      pass.held,
      pass.options,
    );
    if (promisedTo !== undefined) {
      pass.room.promise(shard.id, promisedTo);
      wait(pass, shard, { kind: 'reclaiming', victimIds: [] }, promisedTo);
      return;
    }
  }
  waitForRoom(pass, shard, request);
}

/** The shard is placed: its room, its team's holding and guarantee coverage count it. */
function recordPlacement(
  pass: Pass,
  shard: PendingShard,
  placed: Placed,
  {
    holding,
    guarantee,
    need,
    within,
  }: { holding: TeamHolding; guarantee: Guarantee; need: Bytes; within: boolean },
): void {
  pass.room.recordPlacement(placed, shard.request);
  holding.bytes += need;
  holding.shards += 1;
  pass.holdings.set(shard.teamId, holding);
  const model = pass.room.modelOf(placed.gpuUuids[0]!) ?? '';
  const counts = guaranteeCovers(guarantee, model);
  if (counts) pass.covered.set(shard.teamId, (pass.covered.get(shard.teamId) ?? 0) + need);
  pass.placements.push({ shardId: shard.id, placed, guaranteed: within && counts });
  pass.reclaimersWaiting.delete(shard.id);
}

/**
 * Victims are stopped for the shard: they leave the reclaimable and their teams' coverage, and
 * the room they free is promised to it as its spot.
 */
function recordReclaim(
  pass: Pass,
  shard: PendingShard,
  result: Extract<ReclaimResult, { kind: 'reclaim' }>,
): void {
  const ids = new Set(result.victims.map((v) => v.id));
  for (const victim of result.victims) {
    pass.preemptions.push({
      victimId: victim.id,
      victimTeamId: victim.teamId,
      forShardId: shard.id,
      hostId: victim.hostId,
    });
    const victimTeam = pass.teams.get(victim.teamId);
    if (victimTeam !== undefined && guaranteeCovers(victimTeam.guarantee, victim.gpuModel)) {
      pass.covered.set(victim.teamId, (pass.covered.get(victim.teamId) ?? 0) - victim.quotaBytes);
    }
  }
  pass.stayingHeld = pass.stayingHeld.filter((s) => !ids.has(s.id));
  pass.room.promise(shard.id, result.placed);
  wait(
    pass,
    shard,
    { kind: 'reclaiming', victimIds: result.victims.map((v) => v.id) },
    result.placed,
  );
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

/** The shard waits, next in the waiting list. */
function wait(pass: Pass, shard: PendingShard, reason: WaitReason, spot?: Placed): void {
  const position = pass.waiting.length + 1;
  pass.waiting.push(
    spot === undefined
      ? { shardId: shard.id, position, reason }
      : { shardId: shard.id, position, reason, spot },
  );
}

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
import {
  canReserve,
  type Placed,
  type PlacementOptions,
  type PlacementRequest,
} from '../placement.js';
import { quotaBytesOf } from '../quota.js';
import type { Bytes } from '../sizes.js';
import type { Host } from '../inventory.js';
import type { RoomIndex } from '../room-index.js';
import { AdmissionRoom, promisedRoom, withoutVictims } from './admission-room.js';
import {
  chooseIdleOn,
  chooseIdleToSuspend,
  hostBytesOf,
  suspendableByHost,
  suspendBudgetTakes,
  type MakeRoomAsk,
  type MakeRoomResult,
} from './make-room.js';
import {
  behindWhom,
  CAPACITY,
  guaranteeStanding,
  nonPreemptibleWait,
  partitionExpired,
  quotaWait,
  reclaimersWaitingIn,
  requestToPlace,
  NeedsLeft,
  shardOnlyWaits,
  smallestOverheadOf,
  teamOnlyWaits,
} from './admission-steps.js';
import { guaranteeCovers, NO_GUARANTEE, type Guarantee } from './guarantees.js';
import {
  compareQueued,
  holdingsOf,
  teamsById,
  type HeldShard,
  type PendingShard,
  type QueueTeam,
  type SuspendedShard,
  type TeamHolding,
} from './model.js';
import { chooseVictims, type ReclaimResult } from './reclaim.js';

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
 * turn against what the shards ahead of it left (decideOne).
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

/** What one pass reads and has decided so far; each decision reads what those ahead left. */
interface Pass {
  /** admitWholePass: no shortcut. */
  readonly whole: boolean;
  readonly teams: ReadonlyMap<string, QueueTeam>;
  /** Every shard that holds capacity now, leaving ones included. */
  readonly held: readonly HeldShard[];
  readonly options: PlacementOptions;
  readonly room: AdmissionRoom;
  /** The per-GPU needs of the shards not decided yet: the smallest says when nothing fits. */
  readonly needs: NeedsLeft;
  /** Once true, no shard left fits anywhere now: the rest only wait (or reclaim). */
  full: boolean;
  /** Per team: what it holds, with this pass's placements. */
  readonly holdings: Map<string, TeamHolding>;
  /** Per team: bytes on GPUs its guarantee covers, placements in and victims out. */
  readonly covered: Map<string, number>;
  /** Shards that hold capacity and are not leaving: who a reclaim may choose. */
  stayingHeld: readonly HeldShard[];
  /**
   * The idle elastic shards among them, per host: make-room looks only at these hosts (none,
   * on most fleets: then it costs nothing per waiting shard).
   */
  readonly suspendable: Map<string, HeldShard[]>;
  /** Shards a requeued victim was reclaimed for, while they still wait in this pass. */
  readonly reclaimersWaiting: Set<string>;
  readonly placements: Placement[];
  readonly preemptions: Preemption[];
  readonly suspensions: Suspension[];
  readonly resumes: Resume[];
  /** Per host: the caps (host bytes) of the shards this pass suspends there. */
  readonly suspendingByHost: Map<string, number>;
  readonly waiting: Waiting[];
}

function openPass(
  input: Omit<AdmissionInput, 'pending'>,
  teams: ReadonlyMap<string, QueueTeam>,
  queue: OrderedQueue,
  whole: boolean,
): Pass {
  const { fleet, held, options = {} } = input;
  const holdings = holdingsOf(held, teams, input.suspended);
  const covered = new Map<string, number>();
  for (const [teamId, holding] of holdings) covered.set(teamId, holding.guaranteedModelBytes);
  const needs = queue.needs;
  needs.setOverhead(smallestOverheadOf(fleet, options));
  const stayingHeld = held.filter((s) => !s.leaving);
  return {
    whole,
    teams,
    held,
    options,
    room: new AdmissionRoom(
      fleet,
      needs.smallest(),
      options,
      queue.resumeHosts,
      whole ? undefined : input.roomIndex,
    ),
    needs,
    full: false,
    holdings,
    covered,
    stayingHeld,
    suspendable: suspendableByHost(stayingHeld),
    reclaimersWaiting: queue.reclaimersWaiting,
    placements: [],
    preemptions: [],
    suspensions: [],
    resumes: [],
    suspendingByHost: new Map(),
    waiting: [],
  };
}

function resumeHostsOf(queue: readonly PendingShard[]): Set<string> {
  const hosts = new Set<string>();
  for (const shard of queue) if (shard.resume !== undefined) hosts.add(shard.resume.hostId);
  return hosts;
}

/**
 * One shard, in this order: it waits while the shard it was reclaimed for waits, or when its
 * team's limit or (non-preemptible) guarantee does not allow it; else it is placed where it
 * fits beside the room kept ahead of it; else, within its guarantee, it reclaims; else, with a
 * reclaim in flight, it waits on the room promised to it; else it waits, keeping a spot.
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
  if (!shard.reclaimInFlight && makeRoom(pass, shard, { request })) return;
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
  if (!shard.reclaimInFlight && makeRoom(pass, shard, { request: shard.request, resume })) return;
  if (shard.reclaimInFlight) {
    const promisedTo = promisedRoom(
      shard.id,
      shard.request,
      pass.room.fleetNow(),
      pass.held,
      pass.options,
      resume,
    );
    if (promisedTo !== undefined) {
      pass.room.promise(shard.id, promisedTo);
      wait(pass, shard, { kind: 'suspending', victimIds: [] }, promisedTo);
      return;
    }
  }
  wait(pass, shard, CAPACITY);
}

/**
 * Idle elastic shards are suspended so that the shard fits (make-room.ts): they leave the
 * reclaimable, and the room they free is promised to it as its spot. False when none would do.
 */
function makeRoom(pass: Pass, shard: PendingShard, ask: MakeRoomAsk): boolean {
  const result = pass.whole
    ? chooseIdleToSuspend(
        ask,
        pass.room.fleetNow(),
        pass.stayingHeld,
        pass.options,
        pass.suspendingByHost,
      )
    : chooseIdleOnIndexed(pass, ask);
  if (result === undefined || result.kind === 'none') return false;
  const ids = new Set<string>();
  for (const victim of result.victims) {
    ids.add(victim.id);
    recordSuspension(pass, victim, 'make-room', shard.id);
  }
  leaveStaying(pass, result.victims, ids);
  pass.room.promise(shard.id, result.placed);
  wait(pass, shard, { kind: 'suspending', victimIds: [...ids] }, result.placed);
  return true;
}

/**
 * chooseIdleToSuspend over the hosts that have an idle elastic shard only (the pass's index):
 * the same choice (it does not depend on the hosts' order), and nothing asked of the fleet
 * when no host has one. Undefined: none.
 */
function chooseIdleOnIndexed(pass: Pass, ask: MakeRoomAsk): MakeRoomResult | undefined {
  let byHost: ReadonlyMap<string, readonly HeldShard[]> = pass.suspendable;
  if (ask.resume !== undefined) {
    const own = pass.suspendable.get(ask.resume.hostId);
    byHost = own === undefined ? new Map() : new Map([[ask.resume.hostId, own]]);
  }
  if (byHost.size === 0) return undefined;
  return chooseIdleOn(
    ask,
    pass.room.hostsNow(byHost.keys()),
    byHost,
    pass.options,
    pass.suspendingByHost,
  );
}

/** The victims no longer hold capacity to stay: neither reclaim nor make-room may take them. */
function leaveStaying(pass: Pass, victims: readonly HeldShard[], ids: ReadonlySet<string>): void {
  pass.stayingHeld = pass.stayingHeld.filter((s) => !ids.has(s.id));
  for (const victim of victims) {
    const list = pass.suspendable.get(victim.hostId);
    if (list === undefined) continue;
    const rest = list.filter((s) => !ids.has(s.id));
    if (rest.length === 0) pass.suspendable.delete(victim.hostId);
    else pass.suspendable.set(victim.hostId, rest);
  }
}

function recordSuspension(
  pass: Pass,
  victim: HeldShard,
  cause: Suspension['cause'],
  forShardId: string,
): void {
  pass.suspensions.push({
    shardId: victim.id,
    teamId: victim.teamId,
    hostId: victim.hostId,
    cause,
    forShardId,
  });
  pass.suspendingByHost.set(
    victim.hostId,
    (pass.suspendingByHost.get(victim.hostId) ?? 0) + hostBytesOf(victim),
  );
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
  const suspended = suspendableVictims(pass, result);
  for (const victim of result.victims) {
    if (suspended.has(victim.id)) recordSuspension(pass, victim, 'reclaim', shard.id);
    else {
      pass.preemptions.push({
        victimId: victim.id,
        victimTeamId: victim.teamId,
        forShardId: shard.id,
        hostId: victim.hostId,
      });
    }
    const victimTeam = pass.teams.get(victim.teamId);
    if (victimTeam !== undefined && guaranteeCovers(victimTeam.guarantee, victim.gpuModel)) {
      pass.covered.set(victim.teamId, (pass.covered.get(victim.teamId) ?? 0) - victim.quotaBytes);
    }
  }
  leaveStaying(pass, result.victims, ids);
  pass.room.promise(shard.id, result.placed);
  wait(
    pass,
    shard,
    { kind: 'reclaiming', victimIds: result.victims.map((v) => v.id) },
    result.placed,
  );
}

/**
 * The victims of a reclaim that are suspended instead of stopped: the elastic ones, while the
 * host's budget for suspended shards takes them, and only if the waiting shard still fits with
 * their caps left promised on their GPUs (suspended, not gone); else every victim is stopped.
 */
function suspendableVictims(
  pass: Pass,
  result: Extract<ReclaimResult, { kind: 'reclaim' }>,
): Set<string> {
  const host = pass.room.fleetNow().find((h) => h.id === result.hostId);
  const chosen = new Set<string>();
  if (host === undefined) return chosen;
  let added = pass.suspendingByHost.get(host.id) ?? 0;
  for (const victim of result.victims) {
    if (victim.elastic !== true) continue;
    const more = hostBytesOf(victim);
    if (!suspendBudgetTakes(host, added, more)) continue;
    chosen.add(victim.id);
    added += more;
  }
  if (chosen.size === 0) return chosen;
  const after = withoutVictims(
    host,
    result.victims.map((v) => (chosen.has(v.id) ? { ...v, suspending: true } : v)),
  );
  const stillFits = result.placed.gpuUuids.every((uuid) => {
    const gpu = after.gpus.find((g) => g.uuid === uuid);
    return (
      gpu !== undefined &&
      canReserve(gpu, result.placed.reservedBytesPerGpu, pass.options.defaultOvercommitRatio)
    );
  });
  return stillFits ? chosen : new Set();
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
  pass.waiting.push(
    spot === undefined ? { shardId: shard.id, reason } : { shardId: shard.id, reason, spot },
  );
}

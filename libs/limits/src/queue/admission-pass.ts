/**
 * What one admission pass has decided so far, and what each decision changes for the shards
 * after it: a placement takes room and counts against its team's limit and guarantee; a
 * suspension or reclaim takes its victims out of what later shards may take; a waiting shard
 * is next in the waiting list.
 */
import type { Placed, PlacementOptions } from '../placement.js';
import type { Bytes } from '../sizes.js';
import type {
  AdmissionInput,
  Placement,
  Preemption,
  Resume,
  Suspension,
  Waiting,
  WaitReason,
} from './admission.js';
import type { OrderedQueue } from './admission-order.js';
import { AdmissionRoom } from './admission-room.js';
import { smallestOverheadOf, type NeedsLeft } from './admission-steps.js';
import { guaranteeCovers, type Guarantee } from './guarantees.js';
import { hostBytesOf, suspendableByHost } from './make-room.js';
import {
  holdingsOf,
  type HeldShard,
  type PendingShard,
  type QueueTeam,
  type TeamHolding,
} from './model.js';

/** What one pass reads and has decided so far; each decision reads what those ahead left. */
export interface Pass {
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

export function openPass(
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

/** The victims no longer hold capacity to stay: neither reclaim nor make-room may take them. */
export function leaveStaying(
  pass: Pass,
  victims: readonly HeldShard[],
  ids: ReadonlySet<string>,
): void {
  pass.stayingHeld = pass.stayingHeld.filter((s) => !ids.has(s.id));
  for (const victim of victims) {
    const list = pass.suspendable.get(victim.hostId);
    if (list === undefined) continue;
    const rest = list.filter((s) => !ids.has(s.id));
    if (rest.length === 0) pass.suspendable.delete(victim.hostId);
    else pass.suspendable.set(victim.hostId, rest);
  }
}

export function recordSuspension(
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
export function recordPlacement(
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

/** The shard waits, next in the waiting list. */
export function wait(pass: Pass, shard: PendingShard, reason: WaitReason, spot?: Placed): void {
  pass.waiting.push(
    spot === undefined ? { shardId: shard.id, reason } : { shardId: shard.id, reason, spot },
  );
}

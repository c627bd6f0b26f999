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
 * are kept by `AdmissionRoom` (admission-room.ts); this file is the rules.
 */
import { bytes, formatSize } from '../sizes.js';
import { DEFAULT_CONTEXT_OVERHEAD_BYTES, type Host } from '../inventory.js';
import type { Placed, PlacementOptions } from '../placement.js';
import { quotaBytesOf } from '../quota.js';
import { AdmissionRoom, promisedRoom } from './admission-room.js';
import { guaranteeCovers, NO_GUARANTEE, withinGuaranteeRequest } from './guarantees.js';
import {
  compareQueued,
  holdingsOf,
  teamsById,
  type HeldShard,
  type PendingShard,
  type QueueTeam,
} from './model.js';
import { chooseVictims } from './reclaim.js';

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

/** Shared by every shard that waits for capacity: a deep queue allocates no reason each. */
const CAPACITY: WaitReason = Object.freeze({ kind: 'capacity' });

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

export function admit(input: AdmissionInput): AdmissionPlan {
  const { fleet, held, now, options = {} } = input;
  const teams = teamsById(input.teams);
  const holdings = holdingsOf(held, teams);
  const covered = new Map<string, number>();
  for (const [teamId, holding] of holdings) covered.set(teamId, holding.guaranteedModelBytes);
  const leaving = new Set(held.filter((s) => s.leaving).map((s) => s.id));

  const expired: string[] = [];
  const live: PendingShard[] = [];
  for (const shard of input.pending) {
    if (shard.expiresAt !== undefined && shard.expiresAt <= now) expired.push(shard.id);
    else live.push(shard);
  }
  expired.sort();
  live.sort((a, b) => compareQueued(a, b, teams));

  // Past the point where no shard left could fit anywhere now (its per-GPU need, overhead
  // included, above every GPU's free bytes), nothing more can be placed, so spots no longer
  // matter: the rest only wait (or reclaim). In-pass placements only lower free bytes, so the
  // bound holds for the rest of the pass once it holds. Keeps a pass over a deep queue behind a
  // full fleet linear in the queue, not queue × hosts.
  const minOverhead = Math.min(
    options.defaultOverheadBytes ?? DEFAULT_CONTEXT_OVERHEAD_BYTES,
    ...fleet.map((host) => host.contextOverheadBytes ?? Infinity),
  );
  const needs = live.map((shard) => shard.request.bytesPerGpu + minOverhead);
  const smallestFrom = new Array<number>(live.length + 1).fill(Infinity);
  for (let i = live.length - 1; i >= 0; i--)
    smallestFrom[i] = Math.min(needs[i]!, smallestFrom[i + 1]!);

  const room = new AdmissionRoom(fleet, smallestFrom[0]!, options);

  const placements: Placement[] = [];
  const preemptions: Preemption[] = [];
  const waiting: Waiting[] = [];
  let heldNow = held.filter((s) => !leaving.has(s.id));

  let full = false;

  // The shards some requeued victim was reclaimed for, while they still wait in this pass. Only
  // those are looked up, so a pass over a deep queue builds no set of every waiting id.
  const reclaimTargets = new Set<string>();
  for (const shard of live) {
    if (shard.reclaimedFor !== undefined) reclaimTargets.add(shard.reclaimedFor);
  }
  const stillWaiting = new Set<string>();
  if (reclaimTargets.size > 0) {
    for (const shard of live) if (reclaimTargets.has(shard.id)) stillWaiting.add(shard.id);
  }
  for (let position = 0; position < live.length; position++) {
    const shard = live[position]!;
    if (!full && smallestFrom[position]! > room.largestFreeNow()) full = true;
    if (shard.reclaimedFor !== undefined && stillWaiting.has(shard.reclaimedFor)) {
      waiting.push({
        shardId: shard.id,
        position: waiting.length + 1,
        reason: { kind: 'reclaimed', shardId: shard.reclaimedFor },
      });
      continue;
    }
    const team = teams.get(shard.teamId);
    const guarantee = team?.guarantee ?? NO_GUARANTEE;
    const need = quotaBytesOf(shard.request);
    const holding = holdings.get(shard.teamId) ?? { bytes: 0, shards: 0, guaranteedModelBytes: 0 };
    if (team?.maxShards !== undefined && holding.shards + 1 > team.maxShards) {
      waiting.push({
        shardId: shard.id,
        position: waiting.length + 1,
        reason: {
          kind: 'quota',
          message: `team holds ${holding.shards} shards, its limit is ${team.maxShards}`,
        },
      });
      continue;
    }
    if (team?.maxTotalBytes !== undefined && holding.bytes + need > team.maxTotalBytes) {
      waiting.push({
        shardId: shard.id,
        position: waiting.length + 1,
        reason: {
          kind: 'quota',
          message:
            `team holds ${formatSize(bytes(holding.bytes))} + ${formatSize(need)} ` +
            `> its limit ${formatSize(team.maxTotalBytes)}`,
        },
      });
      continue;
    }
    // Within guarantee: the team stays within it with this shard, on GPUs the guarantee covers.
    const narrowed = withinGuaranteeRequest(shard.request, guarantee.gpuModel);
    const within =
      guarantee.bytes > 0 &&
      narrowed !== undefined &&
      (covered.get(shard.teamId) ?? 0) + need <= guarantee.bytes;
    if (!shard.preemptible && !within) {
      waiting.push({
        shardId: shard.id,
        position: waiting.length + 1,
        reason: {
          kind: 'guarantee',
          message:
            `a non-preemptible shard runs only within its team's guarantee ` +
            `(${formatSize(guarantee.bytes)}${guarantee.gpuModel ? ` on "${guarantee.gpuModel}"` : ''}), ` +
            `which ${formatSize(need)} more would pass`,
        },
      });
      continue;
    }
    const request = !shard.preemptible && narrowed !== undefined ? narrowed : shard.request;
    const placed = full ? undefined : room.placeBesideSpots(request);
    if (placed !== undefined) {
      room.recordPlacement(placed, shard.request);
      holding.bytes += need;
      holding.shards += 1;
      holdings.set(shard.teamId, holding);
      const model = room.modelOf(placed.gpuUuids[0]!) ?? '';
      const counts = guaranteeCovers(guarantee, model);
      if (counts) covered.set(shard.teamId, (covered.get(shard.teamId) ?? 0) + need);
      placements.push({ shardId: shard.id, placed, guaranteed: within && counts });
      stillWaiting.delete(shard.id);
      continue;
    }
    if (within && !shard.reclaimInFlight) {
      const result = chooseVictims(
        { request: shard.request, teamId: shard.teamId, guarantee },
        { fleet: room.fleetNow(), held: heldNow, teams, coveredBytes: covered, options },
      );
      if (result.kind === 'reclaim') {
        const ids = new Set(result.victims.map((v) => v.id));
        for (const victim of result.victims) {
          leaving.add(victim.id);
          preemptions.push({
            victimId: victim.id,
            victimTeamId: victim.teamId,
            forShardId: shard.id,
            hostId: victim.hostId,
          });
          const victimTeam = teams.get(victim.teamId);
          if (victimTeam !== undefined && guaranteeCovers(victimTeam.guarantee, victim.gpuModel)) {
            covered.set(victim.teamId, (covered.get(victim.teamId) ?? 0) - victim.quotaBytes);
          }
        }
        heldNow = heldNow.filter((s) => !ids.has(s.id));
        room.promise(shard.id, result.placed);
        waiting.push({
          shardId: shard.id,
          position: waiting.length + 1,
          reason: { kind: 'reclaiming', victimIds: result.victims.map((v) => v.id) },
          spot: result.placed,
        });
        continue;
      }
    }
    if (shard.reclaimInFlight) {
      const promisedTo = promisedRoom(shard.id, request, room.fleetNow(), held, options);
      if (promisedTo !== undefined) {
        room.promise(shard.id, promisedTo);
        waiting.push({
          shardId: shard.id,
          position: waiting.length + 1,
          reason: { kind: 'reclaiming', victimIds: [] },
          spot: promisedTo,
        });
        continue;
      }
    }
    // A shard whose victims no longer free enough for it keeps no spot: it reclaims again
    // once they are gone.
    const spot = full || shard.reclaimInFlight ? undefined : room.spotInShadowFleet(request);
    if (spot !== undefined) room.keepSpot(shard.id, spot);
    const reason: WaitReason = shard.reclaimInFlight
      ? { kind: 'reclaiming', victimIds: [] }
      : full
        ? CAPACITY
        : behindWhom(room.fitsIfNoRoomWereKept(request), room.spotOwners, shard.id);
    waiting.push(
      spot === undefined
        ? { shardId: shard.id, position: waiting.length + 1, reason }
        : { shardId: shard.id, position: waiting.length + 1, reason, spot },
    );
  }
  return {
    placements,
    preemptions,
    expired,
    waiting,
  };
}

/**
 * Why a shard that could not be placed waits: nowhere fits now, or the room that fits now is
 * kept for a shard ahead of it (the first whose spot is on the host it would take now).
 */
function behindWhom(
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

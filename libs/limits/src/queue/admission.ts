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
 */
import { bytes } from '../sizes.js';
import { DEFAULT_CONTEXT_OVERHEAD_BYTES, type Gpu, type Host } from '../inventory.js';
import {
  freeBytes,
  place,
  type Placed,
  type PlacementOptions,
  type PlacementRequest,
} from '../placement.js';
import { PlacementIndex } from '../placement-index.js';
import { effectiveGpuModelFilter } from '../quota.js';
import { formatSize } from '../sizes.js';
import { quotaBytesOf } from '../quota.js';
import { guaranteeCovers, NO_GUARANTEE } from './guarantees.js';
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

type MutableGpu = { -readonly [K in keyof Gpu]: Gpu[K] };

/** Compute shares a pass placed on one GPU: all of them, and the ISOLATED ones among them. */
interface ComputeAdded {
  permille: number;
  isolated: number;
}

/** One fleet copy per view, GPUs mutable, and a placement index over it. */
class View {
  readonly hosts: Host[];
  readonly gpus = new Map<string, MutableGpu>();
  readonly index: PlacementIndex;
  constructor(fleet: readonly Host[], options: PlacementOptions) {
    this.hosts = fleet.map((host) => {
      const gpus = host.gpus.map((gpu) => {
        const copy: MutableGpu = { ...gpu };
        this.gpus.set(gpu.uuid, copy);
        return copy;
      });
      return { ...host, gpus };
    });
    this.index = new PlacementIndex(options);
    this.index.reset(this.hosts);
  }
  set(hostId: string, uuid: string, reserved: number): void {
    const gpu = this.gpus.get(uuid);
    if (gpu === undefined) return;
    gpu.reservedBytes = bytes(reserved);
    this.index.changed(hostId);
  }
  /** Compute shares guaranteed on the GPU by shards placed in this pass (`isolated` of them ISOLATED). */
  addCompute(hostId: string, uuid: string, added: ComputeAdded): void {
    const gpu = this.gpus.get(uuid);
    if (gpu === undefined) return;
    gpu.guaranteedComputePermille = (gpu.guaranteedComputePermille ?? 0) + added.permille;
    gpu.isolatedComputePermille = (gpu.isolatedComputePermille ?? 0) + added.isolated;
    this.index.changed(hostId);
  }
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

  const inPass = new Map<string, number>();
  /** Room promised to shards whose victims are still stopping: taken in every view. */
  const promised = new Map<string, number>();
  const spots = new Map<string, number>();
  const spotOwners = new Map<string, string[]>();
  /** Compute shares guaranteed by this pass's placements, per GPU. */
  const computeAdded = new Map<string, ComputeAdded>();
  /** GPUs whose views differ from the fleet as given (placed on, or kept as a spot). */
  const touched = new Set<string>();

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

  // The views that place ("now": held + in-pass; "both": in-pass + max(held, spots)) hold only
  // the hosts that can take some shard of this pass: ONLINE, with a GPU whose free bytes reach
  // the smallest need. Placements only lower free bytes, so no other host could take one, and
  // a pass after one freed GPU copies one host, not the fleet. Reclaim ("all": held + in-pass
  // on every host) and spots ("shadow": in-pass + spots on the emptied fleet) look at every
  // host; their views are built when first needed, with what the pass did so far.
  const candidates = fleet.filter(
    (host) =>
      host.state === 'ONLINE' &&
      host.gpus.some((gpu) => freeBytes(gpu, options.defaultOvercommitRatio) >= smallestFrom[0]!),
  );
  // Per GPU: held now (the fleet as given), placed in this pass, kept as spots. The candidate
  // hosts' GPUs (below) are indexed at once, the fleet's when one of another host is asked for
  // (reclaim, spots): a pass that places on one host never indexes 8,000 GPUs.
  const indexOf = (hosts: readonly Host[]): Map<string, { hostId: string; gpu: Gpu }> => {
    const index = new Map<string, { hostId: string; gpu: Gpu }>();
    for (const host of hosts) {
      for (const gpu of host.gpus) index.set(gpu.uuid, { hostId: host.id, gpu });
    }
    return index;
  };
  const candidateIndex = indexOf(candidates);
  let fleetIndex: Map<string, { hostId: string; gpu: Gpu }> | undefined;
  const gpuOf = (uuid: string): { hostId: string; gpu: Gpu } | undefined =>
    candidateIndex.get(uuid) ?? (fleetIndex ??= indexOf(fleet)).get(uuid);
  const pre = (uuid: string): number => gpuOf(uuid)?.gpu.reservedBytes ?? 0;
  const hostOf = (uuid: string): string => gpuOf(uuid)!.hostId;
  const now_ = new View(candidates, options);
  const both = new View(candidates, options);
  let all: View | undefined;
  let shadow: View | undefined;
  /** Placed in this pass or promised to a reclaiming shard: taken in every view. */
  const taken = (uuid: string): number => (inPass.get(uuid) ?? 0) + (promised.get(uuid) ?? 0);
  const setAll = (view: View, uuid: string): void => {
    view.set(hostOf(uuid), uuid, pre(uuid) + taken(uuid));
  };
  const setShadow = (view: View, uuid: string): void => {
    view.set(hostOf(uuid), uuid, taken(uuid) + (spots.get(uuid) ?? 0));
  };
  const built = (view: View, set: (view: View, uuid: string) => void): View => {
    for (const uuid of touched) {
      set(view, uuid);
      const added = computeAdded.get(uuid);
      if (added !== undefined) view.addCompute(hostOf(uuid), uuid, added);
    }
    return view;
  };
  const allView = (): View => (all ??= built(new View(fleet, options), setAll));
  const shadowView = (): View =>
    (shadow ??= built(
      new View(
        fleet.map((host) => ({
          ...host,
          gpus: host.gpus.map((gpu) => ({
            ...gpu,
            reservedBytes: bytes(0),
            guaranteedComputePermille: 0,
            isolatedComputePermille: 0,
          })),
        })),
        options,
      ),
      setShadow,
    ));
  const refresh = (uuid: string): void => {
    touched.add(uuid);
    const hostId = hostOf(uuid);
    const p = pre(uuid);
    const i = taken(uuid);
    const s = spots.get(uuid) ?? 0;
    now_.set(hostId, uuid, p + i);
    both.set(hostId, uuid, i + Math.max(p, s));
    if (all !== undefined) setAll(all, uuid);
    if (shadow !== undefined) setShadow(shadow, uuid);
  };
  const add = (into: Map<string, number>, placed: Placed): void => {
    for (const uuid of placed.gpuUuids) {
      into.set(uuid, (into.get(uuid) ?? 0) + placed.reservedBytesPerGpu);
      refresh(uuid);
    }
  };
  const own = (shardId: string, placed: Placed): void => {
    const owners = spotOwners.get(placed.hostId);
    if (owners === undefined) spotOwners.set(placed.hostId, [shardId]);
    else owners.push(shardId);
  };
  const keepSpot = (shardId: string, placed: Placed): void => {
    add(spots, placed);
    own(shardId, placed);
  };
  /** The hosts that hold promises, as held and placed now with their promises given back. */
  const withoutPromises = (): Host[] => {
    const hostIds = new Set([...promised.keys()].map((uuid) => hostOf(uuid)));
    return allView()
      .hosts.filter((host) => hostIds.has(host.id))
      .map((host) => ({
        ...host,
        gpus: host.gpus.map((gpu) => ({
          ...gpu,
          reservedBytes: bytes(gpu.reservedBytes - (promised.get(gpu.uuid) ?? 0)),
        })),
      }));
  };
  /**
   * Where a shard would fit now if no room were promised, on the hosts that hold promises
   * (elsewhere the `now_` view is exactly what is held and placed): it then waits behind the
   * shard the room is promised to, not for capacity.
   */
  const fitsBesidePromises = (request: PlacementRequest): Placed | undefined => {
    if (promised.size === 0) return undefined;
    const result = place(request, withoutPromises(), options);
    return result.kind === 'placed' ? result : undefined;
  };
  /** The room a reclaim frees, taken in every view until the shard is placed on it. */
  const promise = (shardId: string, placed: Placed): void => {
    add(promised, placed);
    largestFree = undefined;
    own(shardId, placed);
  };

  const placements: Placement[] = [];
  const preemptions: Preemption[] = [];
  const waiting: Waiting[] = [];
  let heldNow = held.filter((s) => !leaving.has(s.id));

  let largestFree: number | undefined;
  const largestFreeNow = (): number => {
    if (largestFree === undefined) {
      largestFree = 0;
      for (const host of now_.hosts) {
        if (host.state !== 'ONLINE') continue;
        for (const gpu of host.gpus) {
          largestFree = Math.max(largestFree, freeBytes(gpu, options.defaultOvercommitRatio));
        }
      }
      // Promised room counts as free here (on any host: a host full at the start of the pass
      // is no candidate): a shard that fits only there waits behind its owner, which the
      // reason must say.
      if (promised.size > 0) {
        for (const host of withoutPromises()) {
          if (host.state !== 'ONLINE') continue;
          for (const gpu of host.gpus) {
            largestFree = Math.max(largestFree, freeBytes(gpu, options.defaultOvercommitRatio));
          }
        }
      }
    }
    return largestFree;
  };
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
    if (!full && smallestFrom[position]! > largestFreeNow()) full = true;
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
    const placed = full ? undefined : both.index.tryPlace(request);
    if (placed !== undefined) {
      add(inPass, placed);
      const permille = shard.request.computeSharePermille ?? 0;
      if (permille > 0) {
        const one = {
          permille,
          isolated: shard.request.computeMode === 'ISOLATED' ? permille : 0,
        };
        for (const uuid of placed.gpuUuids) {
          const sum = computeAdded.get(uuid) ?? { permille: 0, isolated: 0 };
          sum.permille += one.permille;
          sum.isolated += one.isolated;
          computeAdded.set(uuid, sum);
          for (const view of [now_, both, all, shadow]) {
            view?.addCompute(placed.hostId, uuid, one);
          }
        }
      }
      largestFree = undefined;
      holding.bytes += need;
      holding.shards += 1;
      holdings.set(shard.teamId, holding);
      const model = gpuOf(placed.gpuUuids[0]!)?.gpu.model ?? '';
      const counts = guaranteeCovers(guarantee, model);
      if (counts) covered.set(shard.teamId, (covered.get(shard.teamId) ?? 0) + need);
      placements.push({ shardId: shard.id, placed, guaranteed: within && counts });
      stillWaiting.delete(shard.id);
      continue;
    }
    if (within && !shard.reclaimInFlight) {
      const result = chooseVictims(
        { request: shard.request, teamId: shard.teamId, guarantee },
        { fleet: allView().hosts, held: heldNow, teams, coveredBytes: covered, options },
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
        promise(shard.id, result.placed);
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
      const room = promisedRoom(shard.id, request, allView().hosts, held, options);
      if (room !== undefined) {
        promise(shard.id, room);
        waiting.push({
          shardId: shard.id,
          position: waiting.length + 1,
          reason: { kind: 'reclaiming', victimIds: [] },
          spot: room,
        });
        continue;
      }
    }
    // A shard whose victims no longer free enough for it keeps no spot: it reclaims again
    // once they are gone.
    const spot = full || shard.reclaimInFlight ? undefined : shadowView().index.tryPlace(request);
    if (spot !== undefined) keepSpot(shard.id, spot);
    const reason: WaitReason = shard.reclaimInFlight
      ? { kind: 'reclaiming', victimIds: [] }
      : full
        ? CAPACITY
        : behindWhom(
            now_.index.tryPlace(request) ?? fitsBesidePromises(request),
            spotOwners,
            shard.id,
          );
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
 * Where a shard whose reclaim is in flight fits once its victims still held (leaving, reclaimed
 * for it) are gone, on their hosts as they are now (this pass's placements and promises
 * included); undefined when it has no victims left or does not fit there.
 */
function promisedRoom(
  shardId: string,
  request: PlacementRequest,
  hosts: readonly Host[],
  held: readonly HeldShard[],
  options: PlacementOptions,
): Placed | undefined {
  const victims = held.filter((s) => s.leaving && s.reclaimFor === shardId);
  if (victims.length === 0) return undefined;
  const freed = new Map<string, number>();
  for (const victim of victims) {
    for (const uuid of victim.gpuUuids) {
      freed.set(uuid, (freed.get(uuid) ?? 0) + victim.reservedBytesPerGpu);
    }
  }
  const victimHosts = new Set(victims.map((v) => v.hostId as string));
  const candidates = hosts
    .filter((host) => victimHosts.has(host.id))
    .map((host) => ({
      ...host,
      gpus: host.gpus.map((gpu) => {
        const less = freed.get(gpu.uuid) ?? 0;
        return less === 0
          ? gpu
          : { ...gpu, reservedBytes: bytes(Math.max(0, gpu.reservedBytes - less)) };
      }),
    }));
  const result = place(request, candidates, options);
  return result.kind === 'placed' ? result : undefined;
}

/** The request limited to the GPUs a guarantee covers; undefined when it asks for others. */
export function withinGuaranteeRequest(
  request: PlacementRequest,
  term: string | undefined,
): PlacementRequest | undefined {
  if (term === undefined || term.trim() === '') return request;
  const filter = effectiveGpuModelFilter(request.gpuModel, { allowedGpuModels: [term] });
  return filter.ok ? { ...request, gpuModel: filter.filter } : undefined;
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

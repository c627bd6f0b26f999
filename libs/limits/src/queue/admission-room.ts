/**
 * The room an admission pass keeps track of while it goes down the queue: per GPU, what is held
 * now (the fleet as given), what the pass placed, the spots kept for waiting shards and the room
 * promised to reclaiming shards, and the four views of the fleet that placement is asked on
 * ("now", "both", "all", "shadow"; see `AdmissionRoom`). The rules of the pass (who is placed,
 * who reclaims, why each other shard waits) are in admission-order.ts and the files it names;
 * this is the bookkeeping that keeps those views consistent and cheap (only the GPUs a pass touched are copied and indexed
 * again), kept apart so the rules read without it.
 */
import { bytes } from '../sizes.js';
import type { Gpu, Host } from '../inventory.js';
import {
  canResume,
  freeBytes,
  place,
  type Placed,
  type PlacementOptions,
  type PlacementRequest,
} from '../placement.js';
import { PlacementIndex } from '../placement-index.js';
import type { RoomIndex } from '../room-index.js';
import type { SuspendedShard } from './model.js';
import { pinnedPlacement } from './room-after-victims.js';

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

type GpuAt = { hostId: string; gpu: Gpu };

/**
 * The views that place ("now": held + in-pass; "both": in-pass + max(held, spots)) hold only
 * the hosts that can take some shard of this pass: ONLINE, with a GPU whose free bytes reach
 * the smallest need. Placements only lower free bytes, so no other host could take one, and
 * a pass after one freed GPU copies one host, not the fleet. Reclaim ("all": held + in-pass
 * on every host) and spots ("shadow": in-pass + spots on the emptied fleet) look at every
 * host; their views are built when first needed, with what the pass did so far.
 */
export class AdmissionRoom {
  private readonly inPass = new Map<string, number>();
  /** Room promised to shards whose victims are still stopping: taken in every view. */
  private readonly promised = new Map<string, number>();
  private readonly spots = new Map<string, number>();
  /** Per host, the shards that keep a spot or are promised room there, in queue order. */
  readonly spotOwners = new Map<string, string[]>();
  /** Compute shares guaranteed by this pass's placements, per GPU. */
  private readonly computeAdded = new Map<string, ComputeAdded>();
  /** GPUs whose views differ from the fleet as given (placed on, or kept as a spot). */
  private readonly touched = new Set<string>();
  private readonly candidateIndex: Map<string, GpuAt>;
  private fleetIndex: Map<string, GpuAt> | undefined;
  private readonly now: View;
  private readonly both: View;
  private all: View | undefined;
  private allHosts: Map<string, Host> | undefined;
  private shadow: View | undefined;
  private largestFree: number | undefined;

  /**
   * @param resumeHosts hosts of the SUSPENDED shards that want to resume: candidates whatever
   *   their free bytes, since a resume needs only room on the GPU as it is (canResume), not in
   *   its ratio, which its suspended cap already counts (a GPU whose caps fill its ratio has no
   *   free bytes, yet every suspended shard there may come back).
   * @param roomIndex an index of `fleet` (RoomIndex): only the hosts it names are looked at.
   */
  constructor(
    private readonly fleet: readonly Host[],
    smallestNeed: number,
    private readonly options: PlacementOptions,
    resumeHosts: ReadonlySet<string> = new Set(),
    roomIndex?: Pick<RoomIndex, 'hostsThatMayFit'>,
  ) {
    // The index answers the hosts whose memory left may reach the need (a superset, in the
    // fleet's order); a resume's host is a candidate whatever its room, so with resumes every
    // host is looked at.
    const scanned =
      roomIndex !== undefined && resumeHosts.size === 0
        ? roomIndex.hostsThatMayFit(smallestNeed)
        : fleet;
    const candidates = scanned.filter(
      (host) =>
        host.state === 'ONLINE' &&
        (resumeHosts.has(host.id) ||
          host.gpus.some((gpu) => roomFor(gpu, smallestNeed, options.defaultOvercommitRatio))),
    );
    // Per GPU: held now (the fleet as given), placed in this pass, kept as spots. The candidate
    // hosts' GPUs (below) are indexed at once, the fleet's when one of another host is asked for
    // (reclaim, spots): a pass that places on one host never indexes 8,000 GPUs.
    this.candidateIndex = indexOf(candidates);
    this.now = new View(candidates, options);
    this.both = new View(candidates, options);
  }

  /** Where the shard fits now without standing in a spot kept for a shard ahead of it. */
  placeBesideSpots(request: PlacementRequest): Placed | undefined {
    return this.both.index.tryPlace(request);
  }

  /**
   * Where a suspended shard comes back, on its own GPUs, without standing in a spot kept for a
   * shard ahead of it: each GPU's memory (less what unowned processes hold) takes its cap. Only
   * the resident bound: its cap already counts among the GPU's suspended bytes (canResume).
   */
  placePinned(resume: SuspendedShard): Placed | undefined {
    for (const uuid of resume.gpuUuids) {
      const gpu = this.both.gpus.get(uuid);
      if (gpu === undefined || !canResume(gpu, resume.reservedBytesPerGpu)) return undefined;
    }
    return pinnedPlacement(resume);
  }

  /** Counts a placement of this pass (its bytes and compute shares) in every view. */
  recordPlacement(placed: Placed, request: PlacementRequest): void {
    this.add(this.inPass, placed);
    const permille = request.computeSharePermille ?? 0;
    if (permille > 0) {
      const one = {
        permille,
        isolated: request.computeMode === 'ISOLATED' ? permille : 0,
      };
      for (const uuid of placed.gpuUuids) {
        const sum = this.computeAdded.get(uuid) ?? { permille: 0, isolated: 0 };
        sum.permille += one.permille;
        sum.isolated += one.isolated;
        this.computeAdded.set(uuid, sum);
        for (const view of [this.now, this.both, this.all, this.shadow]) {
          view?.addCompute(placed.hostId, uuid, one);
        }
      }
    }
    this.largestFree = undefined;
  }

  /** The model of the GPU, when the fleet has it. */
  modelOf(uuid: string): string | undefined {
    return this.gpuOf(uuid)?.gpu.model;
  }

  /** Every host as held and placed now, promises included: where reclaims are decided. */
  fleetNow(): readonly Host[] {
    return this.allView().hosts;
  }

  /** The hosts named (those of the fleet), as fleetNow() has them; in the order named. */
  hostsNow(hostIds: Iterable<string>): Host[] {
    this.allHosts ??= new Map(this.allView().hosts.map((host) => [host.id as string, host]));
    const hosts: Host[] = [];
    for (const id of hostIds) {
      const host = this.allHosts.get(id);
      if (host !== undefined) hosts.push(host);
    }
    return hosts;
  }

  /** Where the shard would go in the shadow fleet, beside the spots kept ahead of it. */
  spotInShadowFleet(request: PlacementRequest): Placed | undefined {
    return this.shadowView().index.tryPlace(request);
  }

  /**
   * Where the shard would fit now if no room were kept for others (spots or promises): when
   * it does, it waits behind whoever keeps that room, not for capacity.
   */
  fitsIfNoRoomWereKept(request: PlacementRequest): Placed | undefined {
    return this.now.index.tryPlace(request) ?? this.fitsBesidePromises(request);
  }

  keepSpot(shardId: string, placed: Placed): void {
    this.add(this.spots, placed);
    this.own(shardId, placed);
  }

  /** The room a reclaim frees, taken in every view until the shard is placed on it. */
  promise(shardId: string, placed: Placed): void {
    this.add(this.promised, placed);
    this.largestFree = undefined;
    this.own(shardId, placed);
  }

  /** The most free bytes of any ONLINE GPU in the "now" view, promised room counted as free. */
  largestFreeNow(): number {
    if (this.largestFree === undefined) {
      let largestFree = 0;
      for (const host of this.now.hosts) {
        if (host.state !== 'ONLINE') continue;
        for (const gpu of host.gpus) {
          largestFree = Math.max(largestFree, freeBytes(gpu, this.options.defaultOvercommitRatio));
        }
      }
      // Promised room counts as free here (on any host: a host full at the start of the pass
      // is no candidate): a shard that fits only there waits behind its owner, which the
      // reason must say.
      if (this.promised.size > 0) {
        for (const host of this.withoutPromises()) {
          if (host.state !== 'ONLINE') continue;
          for (const gpu of host.gpus) {
            largestFree = Math.max(
              largestFree,
              freeBytes(gpu, this.options.defaultOvercommitRatio),
            );
          }
        }
      }
      this.largestFree = largestFree;
    }
    return this.largestFree;
  }

  private gpuOf(uuid: string): GpuAt | undefined {
    return this.candidateIndex.get(uuid) ?? (this.fleetIndex ??= indexOf(this.fleet)).get(uuid);
  }

  private pre(uuid: string): number {
    return this.gpuOf(uuid)?.gpu.reservedBytes ?? 0;
  }

  private hostOf(uuid: string): string {
    return this.gpuOf(uuid)!.hostId;
  }

  /** Placed in this pass or promised to a reclaiming shard: taken in every view. */
  private taken(uuid: string): number {
    return (this.inPass.get(uuid) ?? 0) + (this.promised.get(uuid) ?? 0);
  }

  private setAll(view: View, uuid: string): void {
    view.set(this.hostOf(uuid), uuid, this.pre(uuid) + this.taken(uuid));
  }

  private setShadow(view: View, uuid: string): void {
    view.set(this.hostOf(uuid), uuid, this.taken(uuid) + (this.spots.get(uuid) ?? 0));
  }

  private built(view: View, set: (view: View, uuid: string) => void): View {
    for (const uuid of this.touched) {
      set(view, uuid);
      const added = this.computeAdded.get(uuid);
      if (added !== undefined) view.addCompute(this.hostOf(uuid), uuid, added);
    }
    return view;
  }

  private allView(): View {
    return (this.all ??= this.built(new View(this.fleet, this.options), (view, uuid) =>
      this.setAll(view, uuid),
    ));
  }

  private shadowView(): View {
    return (this.shadow ??= this.built(
      new View(
        this.fleet.map((host) => ({
          ...host,
          gpus: host.gpus.map((gpu) => ({
            ...gpu,
            reservedBytes: bytes(0),
            guaranteedComputePermille: 0,
            isolatedComputePermille: 0,
          })),
        })),
        this.options,
      ),
      (view, uuid) => this.setShadow(view, uuid),
    ));
  }

  private refresh(uuid: string): void {
    this.touched.add(uuid);
    const hostId = this.hostOf(uuid);
    const p = this.pre(uuid);
    const i = this.taken(uuid);
    const s = this.spots.get(uuid) ?? 0;
    this.now.set(hostId, uuid, p + i);
    this.both.set(hostId, uuid, i + Math.max(p, s));
    if (this.all !== undefined) this.setAll(this.all, uuid);
    if (this.shadow !== undefined) this.setShadow(this.shadow, uuid);
  }

  private add(into: Map<string, number>, placed: Placed): void {
    for (const uuid of placed.gpuUuids) {
      into.set(uuid, (into.get(uuid) ?? 0) + placed.reservedBytesPerGpu);
      this.refresh(uuid);
    }
  }

  private own(shardId: string, placed: Placed): void {
    const owners = this.spotOwners.get(placed.hostId);
    if (owners === undefined) this.spotOwners.set(placed.hostId, [shardId]);
    else owners.push(shardId);
  }

  /** The hosts that hold promises, as held and placed now with their promises given back. */
  private withoutPromises(): Host[] {
    const hostIds = new Set([...this.promised.keys()].map((uuid) => this.hostOf(uuid)));
    return this.allView()
      .hosts.filter((host) => hostIds.has(host.id))
      .map((host) => ({
        ...host,
        gpus: host.gpus.map((gpu) => ({
          ...gpu,
          reservedBytes: bytes(gpu.reservedBytes - (this.promised.get(gpu.uuid) ?? 0)),
        })),
      }));
  }

  /**
   * Where a shard would fit now if no room were promised, on the hosts that hold promises
   * (elsewhere the "now" view is exactly what is held and placed): it then waits behind the
   * shard the room is promised to, not for capacity.
   */
  private fitsBesidePromises(request: PlacementRequest): Placed | undefined {
    if (this.promised.size === 0) return undefined;
    const result = place(request, this.withoutPromises(), this.options);
    return result.kind === 'placed' ? result : undefined;
  }
}

/**
 * Whether the GPU's free bytes reach `need`. Free bytes are never above what its memory has
 * left (total − unowned − reserved), so a GPU short of that, as every GPU of a full fleet is,
 * is passed over without working out its ratio: a pass looks at 8,000 of them.
 */
function roomFor(gpu: Gpu, need: number, defaultRatio: number | undefined): boolean {
  if (need > 0 && gpu.totalBytes - (gpu.unownedBytes ?? 0) - gpu.reservedBytes < need) {
    return false;
  }
  return freeBytes(gpu, defaultRatio) >= need;
}

function indexOf(hosts: readonly Host[]): Map<string, GpuAt> {
  const index = new Map<string, GpuAt>();
  for (const host of hosts) {
    for (const gpu of host.gpus) index.set(gpu.uuid, { hostId: host.id, gpu });
  }
  return index;
}

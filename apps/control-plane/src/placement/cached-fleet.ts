import {
  bytes,
  hostId as toHostId,
  matchesGpuModel,
  PlacementIndex,
  RoomIndex,
  type Bytes,
  type GpuModelFilter,
  type Host,
  type HostId,
  type HostState,
  type PlacementRequest,
  type PlacementResult,
} from '@gpushards/limits';
import { performance } from 'node:perf_hooks';
import { stringRecord } from '../shards/shard-record.js';
import {
  addCounts,
  cachedGpuOf,
  countsOfRow,
  lessThan,
  recount,
  type CachedGpu,
  type GpuCounts,
} from './cached-gpu.js';
import type { GpuRow, HostRow, Reservations } from './fleet-reads.js';

interface CachedHost {
  readonly id: HostId;
  readonly name: string;
  state: HostState;
  readonly labels: Readonly<Record<string, string>>;
  readonly contextOverheadBytes: Bytes;
  gpus: CachedGpu[];
}

/** A change of one GPU's reserved bytes that a transaction committed. */
export interface GpuDelta {
  readonly uuid: string;
  /** Positive: reserved more; negative: released. */
  readonly bytes: number;
  /** The change of its guaranteed compute share, permille; absent: none. */
  readonly permille?: number;
  /** Of `permille`, the change of its ISOLATED shards' shares; absent: none. */
  readonly isolatedPermille?: number;
  /** The change of its suspended shards' caps (docs/elastic.md); absent: none. */
  readonly suspendedBytes?: number;
}

/**
 * The fleet as placement sees it: hosts, their GPUs and reserved bytes, kept in memory so that
 * a createShard does not read 8,000 GPU rows. It is a guess, never the truth: the database's
 * conditional update decides, and several control planes may change the same GPUs. FleetCache
 * keeps it current from the database; this class only holds it.
 *
 * This process's own changes are applied as they commit (`applyCommitted`), and GPUs picked by
 * transactions still running are held (`hold`), so that concurrent requests of one process
 * pick around each other instead of queueing on the same rows.
 */
export class CachedFleet {
  private hostList: CachedHost[] = [];
  /** Remembers each host's placement score; told of every change made here to hostList. */
  private readonly index = new PlacementIndex();
  /** Which hosts have room (the admission pass's candidates); told as `index` is. */
  private readonly room = new RoomIndex();
  private readonly hostsById = new Map<string, CachedHost>();
  private readonly gpusByUuid = new Map<string, CachedGpu>();
  private models: readonly string[] = [];
  private largestHostGpus = 0;

  /**
   * @param committedLocally told of each GPU whose committed counts this process changed
   *   itself: no read of the change feed stands behind them, so the reader checks them again.
   */
  constructor(private readonly committedLocally: (uuid: string) => void) {}

  /** The fleet with this process's in-flight picks counted as reserved. */
  hosts(): readonly Host[] {
    return this.hostList;
  }

  /** place(request, hosts()), through the index: only hosts changed since are scored again. */
  place(request: PlacementRequest): PlacementResult {
    return this.index.place(request);
  }

  /** An index of hosts() by the room their GPUs have left (admit()'s `roomIndex`). */
  roomIndex(): Pick<RoomIndex, 'hostsThatMayFit'> {
    return this.room;
  }

  /** The most GPUs any host has (whatever its state), 0 for an empty fleet. */
  maxGpusPerHost(): number {
    return this.largestHostGpus;
  }

  /** Distinct GPU model names in the fleet, sorted. */
  gpuModels(): readonly string[] {
    return this.models;
  }

  /** Whether any GPU in the fleet (any host state) passes the filter. */
  anyGpuMatches(filter: GpuModelFilter): boolean {
    return this.models.some((model) => matchesGpuModel(model, filter));
  }

  /**
   * Counts `each` more (reserved bytes, compute shares) on each GPU for this process's
   * placements until `release`.
   */
  hold(uuids: readonly string[], each: Readonly<GpuCounts>): void {
    for (const uuid of uuids) {
      const gpu = this.gpusByUuid.get(uuid);
      if (gpu === undefined) continue;
      addCounts(gpu.held, each);
      this.recount(gpu);
    }
  }

  /** Ends a hold; `committed` when its transaction committed the reservation. */
  release(uuids: readonly string[], each: Readonly<GpuCounts>, committed: boolean): void {
    for (const uuid of uuids) {
      const gpu = this.gpusByUuid.get(uuid);
      if (gpu === undefined) continue;
      addCounts(gpu.held, each, -1);
      if (committed) {
        addCounts(gpu.committed, each);
        gpu.localAt = performance.now();
        this.committedLocally(uuid);
      }
      this.recount(gpu);
    }
  }

  /** Applies reserved-byte changes this process committed (releases, resizes). */
  applyCommitted(deltas: readonly GpuDelta[]): void {
    for (const delta of deltas) {
      const gpu = this.gpusByUuid.get(delta.uuid);
      if (gpu === undefined) continue;
      addCounts(gpu.committed, {
        bytes: delta.bytes,
        permille: delta.permille ?? 0,
        isolated: delta.isolatedPermille ?? 0,
        suspended: delta.suspendedBytes ?? 0,
      });
      gpu.localAt = performance.now();
      this.committedLocally(delta.uuid);
      this.recount(gpu);
    }
  }

  /** A host's new state, as this process committed it. */
  setHostState(id: string, state: HostState): void {
    const host = this.hostsById.get(id);
    if (host === undefined) return;
    host.state = state;
    this.changed(host.id);
  }

  /** The whole fleet, from rows read at `startedAt` (performance.now()). */
  replaceAll(hosts: readonly HostRow[], gpus: readonly GpuRow[], startedAt: number): void {
    const gpusByHost = new Map<string, GpuRow[]>();
    for (const gpu of gpus) {
      const list = gpusByHost.get(gpu.hostId);
      if (list === undefined) gpusByHost.set(gpu.hostId, [gpu]);
      else list.push(gpu);
    }
    this.setHostList(hosts.map((row) => this.toHost(row, gpusByHost.get(row.id) ?? [], startedAt)));
  }

  /**
   * These hosts, from rows read at `startedAt` (`gpus` holds their GPUs, committed counts); a
   * host without a row is gone.
   */
  replaceHosts(
    ids: readonly string[],
    hosts: readonly HostRow[],
    gpus: readonly GpuRow[],
    startedAt: number,
  ): void {
    let replaced = this.hostList;
    for (const id of ids) {
      const row = hosts.find((host) => host.id === id);
      const old = this.hostsById.get(id);
      if (row === undefined && old === undefined) continue;
      const rows = gpus.filter((gpu) => gpu.hostId === id);
      if (row !== undefined && old !== undefined && this.updateInPlace(old, row, rows, startedAt)) {
        continue;
      }
      replaced = replaced.filter((host) => host.id !== id);
      if (row !== undefined) replaced.push(this.toHost(row, rows, startedAt));
    }
    if (replaced !== this.hostList) {
      this.setHostList(replaced.sort((a, b) => (a.id < b.id ? -1 : 1)));
    }
  }

  /**
   * The committed counts a read that started at `startedAt` brought, except on GPUs this
   * process committed to since; true when any of them fell (room was freed).
   */
  applyReservations(
    {
      reserved,
      compute,
      isolated,
      suspended = {},
      unowned = {},
    }: Pick<Reservations, 'reserved' | 'compute' | 'isolated' | 'suspended' | 'unowned'>,
    startedAt: number,
  ): boolean {
    let freed = false;
    for (const [uuid, bytesRead] of Object.entries(reserved)) {
      const gpu = this.gpusByUuid.get(uuid);
      if (gpu === undefined) continue;
      const unownedRead = unowned[uuid] ?? 0;
      if (unownedRead !== gpu.unownedBytes) {
        if (unownedRead < gpu.unownedBytes) freed = true;
        gpu.unownedBytes = bytes(unownedRead);
        this.changed(gpu.hostId);
      }
      if (gpu.localAt > startedAt) continue;
      const read = {
        bytes: bytesRead,
        permille: compute[uuid] ?? 0,
        isolated: isolated[uuid] ?? 0,
        suspended: suspended[uuid] ?? 0,
      };
      if (lessThan(read, gpu.committed)) freed = true;
      Object.assign(gpu.committed, read);
      this.recount(gpu);
    }
    return freed;
  }

  /**
   * A host whose GPUs are the ones cached takes its state and reserved bytes from the rows
   * without being replaced; false when it changed otherwise (it must be replaced).
   */
  private updateInPlace(
    host: CachedHost,
    row: HostRow,
    gpus: readonly GpuRow[],
    startedAt: number,
  ): boolean {
    const same =
      host.name === row.name &&
      host.contextOverheadBytes === Number(row.contextOverheadBytes) &&
      JSON.stringify(host.labels) === JSON.stringify(stringRecord(row.labels)) &&
      gpus.length === host.gpus.length &&
      gpus.every(
        (gpu) =>
          this.gpusByUuid.get(gpu.uuid) !== undefined &&
          host.gpus.includes(this.gpusByUuid.get(gpu.uuid)!),
      );
    if (!same) return false;
    host.state = row.state;
    this.changed(host.id);
    for (const gpu of gpus) {
      const cached = this.gpusByUuid.get(gpu.uuid)!;
      cached.isolatedPoolPermille = gpu.isolatedPoolPermille;
      cached.unownedBytes = bytes(Number(gpu.unattributedBytes));
      if (cached.localAt > startedAt) continue;
      Object.assign(cached.committed, countsOfRow(gpu));
      this.recount(cached);
    }
    return true;
  }

  /** Both indexes hear of a host changed in place. */
  private changed(hostId: string): void {
    this.index.changed(hostId);
    this.room.changed(hostId);
  }

  private recount(gpu: CachedGpu): void {
    if (recount(gpu)) this.changed(gpu.hostId);
  }

  /** A host from its rows; GPUs keep what this process holds on them (cachedGpuOf). */
  private toHost(row: HostRow, gpus: readonly GpuRow[], startedAt: number): CachedHost {
    const id = toHostId(row.id);
    return {
      id,
      name: row.name,
      state: row.state,
      labels: stringRecord(row.labels),
      contextOverheadBytes: bytes(Number(row.contextOverheadBytes)),
      gpus: gpus.map((gpu) => cachedGpuOf(gpu, id, this.gpusByUuid.get(gpu.uuid), startedAt)),
    };
  }

  private setHostList(hosts: CachedHost[]): void {
    this.hostList = hosts;
    this.index.reset(hosts);
    this.room.reset(hosts);
    this.hostsById.clear();
    this.gpusByUuid.clear();
    const models = new Set<string>();
    let largest = 0;
    for (const host of hosts) {
      this.hostsById.set(host.id, host);
      largest = Math.max(largest, host.gpus.length);
      for (const gpu of host.gpus) {
        this.gpusByUuid.set(gpu.uuid, gpu);
        models.add(gpu.model);
      }
    }
    this.models = [...models].sort();
    this.largestHostGpus = largest;
  }
}

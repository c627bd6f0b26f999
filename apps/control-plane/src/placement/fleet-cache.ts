import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import {
  bytes,
  hostId as toHostId,
  matchesGpuModel,
  PlacementIndex,
  type Bytes,
  type GpuModelFilter,
  type Host,
  type HostId,
  type HostState,
  type PlacementRequest,
  type PlacementResult,
} from '@gpushards/limits';
import { performance } from 'node:perf_hooks';
import { PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
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
import {
  readHosts,
  readReservations,
  readWholeFleet,
  type DatabaseReader,
  type GpuRow,
  type HostRow,
} from './fleet-reads.js';
import { QueueSignal } from './queue-signal.js';

/**
 * How often the GPUs' reserved bytes are read again (one small JSON value), besides the reads
 * that misses and no-fits cause. The hosts and GPUs themselves are read again when that read
 * shows a host changed (registered, cordoned, offline: host.updated_at moves) or the number of
 * hosts did.
 */
export const FLEET_REFRESH_INTERVAL_MS = 1000;

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
}

/**
 * The fleet as placement sees it: hosts, their GPUs and reserved bytes, kept in memory so that
 * a createShard does not read 8,000 GPU rows. It is a guess, never the truth: the database's
 * conditional update decides, and several control planes may change the same GPUs.
 *
 * - Read whole every FLEET_REFRESH_INTERVAL_MS, and on demand (`refreshedSince`), by one read
 *   at a time that every waiting caller shares.
 * - One host is read again inside the transaction when a conditional update on it missed.
 * - This process's own changes are applied as they commit (`applyCommitted`), and GPUs picked
 *   by transactions still running are held (`hold`), so that concurrent requests of one
 *   process pick around each other instead of queueing on the same rows.
 */
@Injectable()
export class FleetCache implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger: Logger;
  private hostList: CachedHost[] = [];
  /** Remembers each host's placement score; told of every change made here to hostList. */
  private readonly index = new PlacementIndex();
  private readonly hostsById = new Map<string, CachedHost>();
  private readonly gpusByUuid = new Map<string, CachedGpu>();
  private models: readonly string[] = [];
  private largestHostGpus = 0;
  /** performance.now() at which the last completed read started. */
  private lastReadStartedAt = Number.NEGATIVE_INFINITY;
  /** What the last whole read saw: a later read that sees otherwise reads everything again. */
  private seenHosts = { count: 0, changedAt: '' };
  private reading: { readonly startedAt: number; readonly done: Promise<void> } | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly prisma: PrismaService,
    private readonly signal: QueueSignal,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'placement' });
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.refreshedSince(performance.now());
    this.timer = setInterval(() => {
      this.refreshReservations().catch((error: unknown) =>
        this.logger.error({ err: error }, 'could not read the fleet'),
      );
    }, FLEET_REFRESH_INTERVAL_MS);
    this.timer.unref();
  }

  async onModuleDestroy(): Promise<void> {
    clearInterval(this.timer);
    await this.reading?.done.catch(() => undefined);
  }

  /** The fleet with this process's in-flight picks counted as reserved. */
  hosts(): readonly Host[] {
    return this.hostList;
  }

  /** place(request, hosts()), through the index: only hosts changed since are scored again. */
  place(request: PlacementRequest): PlacementResult {
    return this.index.place(request);
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

  /** Resolves once a whole read that started at or after `since` (performance.now()) is in. */
  async refreshedSince(since: number): Promise<void> {
    while (this.lastReadStartedAt < since) {
      const reading = this.reading;
      if (reading !== undefined) {
        await reading.done;
        continue;
      }
      const startedAt = performance.now();
      const done = this.readAll(startedAt).finally(() => {
        this.reading = undefined;
      });
      this.reading = { startedAt, done };
      await done;
    }
  }

  /**
   * Reads every GPU's reserved bytes (the periodic read), or everything when a host changed.
   * Skipped while a whole read runs: that one brings the same news.
   */
  async refreshReservations(): Promise<void> {
    if (this.reading !== undefined) return;
    const startedAt = performance.now();
    const row = await readReservations(this.prisma.direct);
    if (row.hostCount !== this.seenHosts.count || row.hostsChangedAt !== this.seenHosts.changedAt) {
      await this.refreshedSince(performance.now());
      // A host of another control plane came online, was uncordoned or joined.
      this.signal.freed();
      return;
    }
    const { compute, isolated } = row;
    let freed = false;
    for (const [uuid, reserved] of Object.entries(row.reserved)) {
      const gpu = this.gpusByUuid.get(uuid);
      if (gpu === undefined || gpu.localAt > startedAt) continue;
      const read = { bytes: reserved, permille: compute[uuid] ?? 0, isolated: isolated[uuid] ?? 0 };
      if (lessThan(read, gpu.committed)) freed = true;
      Object.assign(gpu.committed, read);
      this.recount(gpu);
    }
    // Another control plane freed room: this process's queue learns of it here.
    if (freed) this.signal.freed();
  }

  /** Starts a whole read without waiting for it (after a host registered or changed). */
  requestRefresh(): void {
    this.refreshedSince(performance.now()).catch((error: unknown) =>
      this.logger.error({ err: error }, 'could not read the fleet'),
    );
  }

  /**
   * Reads these hosts and their GPUs again, after a conditional update on them missed
   * (another control plane took their GPUs first). Inside a transaction, `uncommitted` names
   * what that transaction itself added to GPUs (reserved bytes, compute shares): the rows
   * already include it, while the cache still counts it as held until the transaction ends.
   */
  async reloadHosts(
    reader: DatabaseReader,
    ids: readonly string[],
    uncommitted: ReadonlyMap<string, Readonly<GpuCounts>> = new Map(),
  ): Promise<void> {
    if (ids.length === 0) return;
    const startedAt = performance.now();
    const { hosts, gpus } = await readHosts(reader, ids);
    const committed = (gpu: GpuRow): GpuRow => {
      const added = uncommitted.get(gpu.uuid);
      if (added === undefined) return gpu;
      return {
        ...gpu,
        reservedBytes: Number(gpu.reservedBytes) - added.bytes,
        guaranteedComputePermille: gpu.guaranteedComputePermille - added.permille,
        isolatedComputePermille: gpu.isolatedComputePermille - added.isolated,
      };
    };
    let replaced = this.hostList;
    for (const id of ids) {
      const row = hosts.find((host) => host.id === id);
      const old = this.hostsById.get(id);
      if (row === undefined && old === undefined) continue;
      const rows = gpus.filter((gpu) => gpu.hostId === id).map(committed);
      if (row !== undefined && old !== undefined && this.updateInPlace(old, row, rows, startedAt)) {
        continue;
      }
      replaced = replaced.filter((host) => host.id !== id);
      if (row !== undefined) replaced.push(this.toHost(row, rows, startedAt));
    }
    if (replaced !== this.hostList) {
      this.replaceHosts(replaced.sort((a, b) => (a.id < b.id ? -1 : 1)));
    }
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
    this.index.changed(host.id);
    for (const gpu of gpus) {
      const cached = this.gpusByUuid.get(gpu.uuid)!;
      cached.isolatedPoolPermille = gpu.isolatedPoolPermille;
      if (cached.localAt > startedAt) continue;
      Object.assign(cached.committed, countsOfRow(gpu));
      this.recount(cached);
    }
    return true;
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
      });
      gpu.localAt = performance.now();
      this.recount(gpu);
    }
  }

  /** A host's new state, as this process committed it. */
  setHostState(id: string, state: HostState): void {
    const host = this.hostsById.get(id);
    if (host === undefined) return;
    host.state = state;
    this.index.changed(host.id);
  }

  private recount(gpu: CachedGpu): void {
    if (recount(gpu)) this.index.changed(gpu.hostId);
  }

  private async readAll(startedAt: number): Promise<void> {
    const fleet = await readWholeFleet(this.prisma.direct);
    const gpusByHost = new Map<string, GpuRow[]>();
    for (const gpu of fleet.gpus) {
      const list = gpusByHost.get(gpu.hostId);
      if (list === undefined) gpusByHost.set(gpu.hostId, [gpu]);
      else list.push(gpu);
    }
    this.replaceHosts(
      fleet.hosts.map((row) => this.toHost(row, gpusByHost.get(row.id) ?? [], startedAt)),
    );
    this.seenHosts = { count: fleet.hostCount, changedAt: fleet.hostsChangedAt };
    this.lastReadStartedAt = startedAt;
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

  private replaceHosts(hosts: CachedHost[]): void {
    this.hostList = hosts;
    this.index.reset(hosts);
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

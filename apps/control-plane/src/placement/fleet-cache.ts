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
 * How often the GPUs whose reservations changed are read again (one small JSON value), besides
 * the reads that misses and no-fits cause. The hosts and GPUs themselves are read again when
 * that read shows a host changed (registered, cordoned, offline: host.changed_xid stamped) or
 * the number of hosts did.
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
 * - Read whole at start and on demand (`refreshedSince`), by one read at a time that every
 *   waiting caller shares.
 * - Every FLEET_REFRESH_INTERVAL_MS, only the GPUs whose reservations changed since the last
 *   read (`refreshReservations`), from a change feed that cannot miss a commit:
 *
 *   A trigger stamps each change of a GPU's reserved bytes or compute shares with its
 *   transaction's id (gpu.reservations_changed_xid, migration 20261127211721_fleet_change_feed),
 *   whatever statement made it, and each change of what placement reads of a host
 *   (host.changed_xid: a host stamped since means a whole read). Each read also takes its
 *   snapshot's xmin, the oldest transaction still running then (the watermark); the next read
 *   fetches the rows stamped at or above it.
 *   A transaction below it had ended when that read's snapshot was taken, so that read saw its
 *   rows; one that commits later, however long it ran and in whatever order transactions commit
 *   (a row stamped 10 committing after one stamped 11 was read), had not ended, so its id is at
 *   or above the watermark and the next read fetches its rows. A sequence number taken at the
 *   write would not do: it orders writes, not commits, and the reader cannot tell how far back
 *   an uncommitted one lies. The price: rows of transactions still running at a read are read
 *   again at the next, and a long writing transaction anywhere in the cluster widens every read
 *   until it ends (never narrows it). PGlite (one connection, transactions serial) is the same
 *   PostgreSQL and works the same way. The stamp is indexed, so PostgreSQL touches only the
 *   changed rows too; that costs each reservation change its HOT update (bench/README.md, fleet
 *   section: the measured trade-off).
 *
 *   The feed covers what the database committed; the cache also holds values of its own: this
 *   process's commits applied by delta, and rows read inside a transaction (`reloadHosts`),
 *   whose snapshot may be older than the watermark. Those GPUs are remembered (`recheck`) and
 *   read again, stamped or not, by the next periodic read that starts after they were set, so
 *   a delta applied onto a value that was already stale, or a reload older than the last read,
 *   is corrected within one interval, as the whole reads did before.
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
  /**
   * The last read's change-feed watermark: the next periodic read fetches the GPUs changed by
   * transactions at or above it. Undefined before the first read (or where the reader gives
   * none): the periodic read then reads every GPU.
   */
  private watermark: string | undefined;
  /**
   * GPUs whose cached counts did not come from a read of the change feed (this process's own
   * commits, `reloadHosts`), with performance.now() when they were set: the next periodic read
   * that starts later reads them too.
   */
  private readonly recheck = new Map<string, number>();
  /** The read under way, whole or periodic: one at a time, so the watermark matches the rows. */
  private reading: { readonly whole: boolean; readonly done: Promise<unknown> } | undefined;
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
        // A periodic read's failure is its own caller's to log; a whole read follows.
        await (reading.whole ? reading.done : reading.done.catch(() => undefined));
        continue;
      }
      const startedAt = performance.now();
      const done = this.readAll(startedAt).finally(() => {
        this.reading = undefined;
      });
      this.reading = { whole: true, done };
      await done;
    }
  }

  /**
   * The periodic read: the GPUs whose reservations changed since the last read (the change
   * feed) and those to `recheck`, or everything when a host changed. Skipped while another
   * read runs: that one brings the same news.
   */
  async refreshReservations(): Promise<void> {
    if (this.reading !== undefined) return;
    const done = this.readChanges().finally(() => {
      this.reading = undefined;
    });
    this.reading = { whole: false, done };
    if (!(await done)) return;
    await this.refreshedSince(performance.now());
    // A host of another control plane came online, was uncordoned or joined.
    this.signal.freed();
  }

  /** Reads and applies the changed GPUs; true when a host changed (a whole read is due). */
  private async readChanges(): Promise<boolean> {
    const startedAt = performance.now();
    const recheck = [...this.recheck.keys()];
    const row = await readReservations(this.prisma.direct, this.watermark, recheck);
    const hostsChanged = row.hostsChanged ?? row.hostsChangedAt !== this.seenHosts.changedAt;
    if (row.hostCount !== this.seenHosts.count || hostsChanged) return true;
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
    this.watermark = row.watermark;
    this.forgetRechecked(recheck, startedAt);
    // Another control plane freed room: this process's queue learns of it here.
    if (freed) this.signal.freed();
    return false;
  }

  /** GPUs a read that started at `startedAt` brought, unless they were set again since. */
  private forgetRechecked(uuids: Iterable<string>, startedAt: number): void {
    for (const uuid of uuids) {
      if ((this.recheck.get(uuid) ?? Number.POSITIVE_INFINITY) <= startedAt) {
        this.recheck.delete(uuid);
      }
    }
  }

  /** Marks GPUs to read again at the next periodic read (their counts came from elsewhere). */
  private toRecheck(uuid: string): void {
    this.recheck.set(uuid, performance.now());
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
    // Read in a snapshot that may predate the last periodic read: read again at the next.
    for (const gpu of gpus) this.toRecheck(gpu.uuid);
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
        this.toRecheck(uuid);
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
      this.toRecheck(delta.uuid);
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
    this.watermark = fleet.watermark;
    this.forgetRechecked([...this.recheck.keys()], startedAt);
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

import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import type {
  GpuModelFilter,
  Host,
  HostState,
  PlacementRequest,
  PlacementResult,
  RoomIndex,
} from '@gpushards/limits';
import { performance } from 'node:perf_hooks';
import { PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { CachedFleet, type GpuDelta } from './cached-fleet.js';
import type { GpuCounts } from './cached-gpu.js';
import {
  readHosts,
  readReservations,
  readWholeFleet,
  type DatabaseReader,
  type GpuRow,
} from './fleet-reads.js';
import { QueueSignal } from './queue-signal.js';

export type { GpuDelta } from './cached-fleet.js';

/**
 * How often the GPUs whose reservations changed are read again (one small JSON value), besides
 * the reads that misses and no-fits cause. The hosts and GPUs themselves are read again when
 * that read shows a host changed (registered, cordoned, offline: host.changed_xid stamped) or
 * the number of hosts did.
 */
export const FLEET_REFRESH_INTERVAL_MS = 1000;

/**
 * The fleet placement decides on (CachedFleet, in memory), kept current from the database:
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
 * - createShard's batch statement returns its GPUs' counts as it found them under their row
 *   locks (`applyLocked`), and a host is read again inside the transaction when that statement
 *   found it no longer ONLINE or a GPU of it missing (`reloadHosts`).
 */
@Injectable()
export class FleetCache implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger: Logger;
  private readonly fleet = new CachedFleet((uuid) => this.toRecheck(uuid));
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
    return this.fleet.hosts();
  }

  /** place(request, hosts()), through the index: only hosts changed since are scored again. */
  place(request: PlacementRequest): PlacementResult {
    return this.fleet.place(request);
  }

  /**
   * An index of hosts() (those very objects) by the room their GPUs have left: an admission
   * pass over hosts() starts from the hosts it names, not from 8,000 GPUs.
   */
  roomIndex(): Pick<RoomIndex, 'hostsThatMayFit'> {
    return this.fleet.roomIndex();
  }

  /** The most GPUs any host has (whatever its state), 0 for an empty fleet. */
  maxGpusPerHost(): number {
    return this.fleet.maxGpusPerHost();
  }

  /** Distinct GPU model names in the fleet, sorted. */
  gpuModels(): readonly string[] {
    return this.fleet.gpuModels();
  }

  /** Whether any GPU in the fleet (any host state) passes the filter. */
  anyGpuMatches(filter: GpuModelFilter): boolean {
    return this.fleet.anyGpuMatches(filter);
  }

  /**
   * Counts `each` more (reserved bytes, compute shares) on each GPU for this process's
   * placements until `release`.
   */
  hold(uuids: readonly string[], each: Readonly<GpuCounts>): void {
    this.fleet.hold(uuids, each);
  }

  /** Ends a hold; `committed` when its transaction committed the reservation. */
  release(uuids: readonly string[], each: Readonly<GpuCounts>, committed: boolean): void {
    this.fleet.release(uuids, each, committed);
  }

  /** Applies reserved-byte changes this process committed (releases, resizes). */
  applyCommitted(deltas: readonly GpuDelta[]): void {
    this.fleet.applyCommitted(deltas);
  }

  /** A host's new state, as this process committed it. */
  setHostState(id: string, state: HostState): void {
    this.fleet.setHostState(id, state);
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

  /** Starts a whole read without waiting for it (after a host registered or changed). */
  requestRefresh(): void {
    this.refreshedSince(performance.now()).catch((error: unknown) =>
      this.logger.error({ err: error }, 'could not read the fleet'),
    );
  }

  /**
   * Reads these hosts and their GPUs again, after a conditional update on them missed (the
   * host left ONLINE, a GPU went missing, or another control plane took their GPUs). Inside a
   * transaction, `uncommitted` names what that transaction itself added to GPUs (reserved
   * bytes, compute shares): the rows already include it, while the cache still counts it as
   * held until the transaction ends.
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
        suspendedBytes: Number(gpu.suspendedBytes) - (added.suspended ?? 0),
      };
    };
    this.fleet.replaceHosts(ids, hosts, gpus.map(committed), startedAt);
  }

  /**
   * GPUs' counts as a statement found them under its row locks (createShard's batch statement)
   * inside a transaction that started the statement at `startedAt`; `uncommitted` is what that
   * transaction itself added to them before, as in `reloadHosts`. No later commit can have
   * changed those rows before this transaction ends (it holds their locks), so these counts
   * are as new as any read's and need no second look; a GPU this process committed to since
   * `startedAt` keeps its own count.
   */
  applyLocked(
    gpus: readonly {
      uuid: string;
      reservedBytes: number;
      guaranteedComputePermille: number;
      isolatedComputePermille: number;
      suspendedBytes: number;
      unattributedBytes: number;
    }[],
    uncommitted: ReadonlyMap<string, Readonly<GpuCounts>>,
    startedAt: number,
  ): void {
    const read = { reserved: {}, compute: {}, isolated: {}, suspended: {}, unowned: {} } as {
      [K in 'reserved' | 'compute' | 'isolated' | 'suspended' | 'unowned']: Record<string, number>;
    };
    for (const gpu of gpus) {
      const added = uncommitted.get(gpu.uuid);
      read.reserved[gpu.uuid] = gpu.reservedBytes - (added?.bytes ?? 0);
      read.compute[gpu.uuid] = gpu.guaranteedComputePermille - (added?.permille ?? 0);
      read.isolated[gpu.uuid] = gpu.isolatedComputePermille - (added?.isolated ?? 0);
      read.suspended[gpu.uuid] = gpu.suspendedBytes - (added?.suspended ?? 0);
      read.unowned[gpu.uuid] = gpu.unattributedBytes;
    }
    // Room another control plane freed: the periodic read will not see it as news now.
    if (this.fleet.applyReservations(read, startedAt)) this.signal.freed();
  }

  private async readAll(startedAt: number): Promise<void> {
    const read = await readWholeFleet(this.prisma.direct);
    this.fleet.replaceAll(read.hosts, read.gpus, startedAt);
    this.seenHosts = { count: read.hostCount, changedAt: read.hostsChangedAt };
    this.watermark = read.watermark;
    this.forgetRechecked([...this.recheck.keys()], startedAt);
    this.lastReadStartedAt = startedAt;
  }

  /** Reads and applies the changed GPUs; true when a host changed (a whole read is due). */
  private async readChanges(): Promise<boolean> {
    const startedAt = performance.now();
    const recheck = [...this.recheck.keys()];
    const row = await readReservations(this.prisma.direct, this.watermark, recheck);
    const hostsChanged = row.hostsChanged ?? row.hostsChangedAt !== this.seenHosts.changedAt;
    if (row.hostCount !== this.seenHosts.count || hostsChanged) return true;
    const freed = this.fleet.applyReservations(row, startedAt);
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
}

import { watch, type FSWatcher } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { readRegion, RegionError, type Region } from './region-file.js';

/** The region file's name inside a shard's region folder. */
const REGION_FILE = 'region';

/** A process of a suspended shard asked for the GPU: the region's wake_requests rose. */
export interface WakeRing {
  readonly shardId: string;
  readonly requests: bigint;
  /** CLOCK_MONOTONIC ns of the last request, as libvgpu.so stamped it (the tenant's word). */
  readonly atNs: bigint;
}

/** An allocation refused under pressure (#31): a GPU's pressure_count rose in the region. */
export interface PressureRing {
  readonly shardId: string;
  /** As the region writes it (formatUuid: GPU-, lowercase hex). */
  readonly gpuUuid: string;
  readonly count: bigint;
  /** CLOCK_MONOTONIC ns of the last refusal (the tenant's word). */
  readonly atNs: bigint;
}

/**
 * One read of a region at most this often, whatever its bells do: a tenant that rings in a
 * loop costs the agent at most 100 reads of 2,304 bytes a second (about 5 ms of CPU).
 */
export const MIN_READ_GAP_MS = 10;
/** Every watched region is also read this often, for rings the watch did not bring. */
export const FALLBACK_READ_MS = 1000;
/** A pressure count found on the first read is a fresh ring only when its stamp is this recent. */
const FRESH_NS = 1_000_000_000n;

interface Watch {
  readonly shardId: string;
  readonly path: string;
  watcher?: FSWatcher;
  reading: boolean;
  /** A ring came while a read ran or waited: read again after it. */
  dirty: boolean;
  lastReadAt: number;
  timer?: NodeJS.Timeout;
  /** What the last read found; undefined before the first. */
  wakeRequests?: bigint;
  readonly pressure: Map<string, bigint>;
  closed: boolean;
}

/**
 * Watches each shard's region file for its bells (docs/elastic.md, "Files shared with
 * libvgpu.so"): libvgpu.so counts a wake or pressure request through its mapping, then
 * pwrite(2)s over `bell`, which raises an inotify event on the region's folder that a write
 * through a mapping would not. Each event makes the agent read the region's header and device
 * table (coalesced: one read per MIN_READ_GAP_MS per shard), and a rise of wake_requests or of a
 * GPU's pressure_count goes to the listeners. A periodic read (FALLBACK_READ_MS) catches rings
 * the watch lost (a full inotify queue). The folder is watched, not the file: libvgpu.so creates
 * the file when the container's first CUDA process starts, after the agent started watching.
 */
@Injectable()
export class RegionWatchService implements OnModuleDestroy {
  private readonly watches = new Map<string, Watch>();
  private readonly wakeListeners = new Set<(ring: WakeRing) => void>();
  private readonly pressureListeners = new Set<(ring: PressureRing) => void>();
  private readonly fallback: NodeJS.Timeout;
  private readonly logger: Logger;
  /** Region reads, for tests and the benchmark. */
  reads = 0;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'region-watch' });
    this.fallback = setInterval(() => {
      for (const entry of this.watches.values()) this.schedule(entry);
    }, FALLBACK_READ_MS);
    this.fallback.unref();
  }

  onWake(listener: (ring: WakeRing) => void): void {
    this.wakeListeners.add(listener);
  }

  onPressure(listener: (ring: PressureRing) => void): void {
    this.pressureListeners.add(listener);
  }

  /** Starts watching a shard's region folder (again: its folder may be new); reads it once. */
  add(shardId: string): void {
    this.remove(shardId);
    const folder = join(this.config.regionRoot, shardId);
    const entry: Watch = {
      shardId,
      path: join(folder, REGION_FILE),
      reading: false,
      dirty: false,
      lastReadAt: -Infinity,
      pressure: new Map(),
      closed: false,
    };
    try {
      entry.watcher = watch(folder, { persistent: false }, (_event, filename) => {
        if (filename === null || filename === REGION_FILE) this.schedule(entry);
      });
      entry.watcher.on('error', (error) => {
        this.logger.warn(
          { err: error, shardId },
          'lost the watch on a region; reading it periodically',
        );
        entry.watcher?.close();
        entry.watcher = undefined;
      });
    } catch (error) {
      // No folder (yet): the periodic read still looks.
      this.logger.debug({ err: error, shardId }, 'cannot watch a region folder');
    }
    this.watches.set(shardId, entry);
    this.schedule(entry);
  }

  remove(shardId: string): void {
    const entry = this.watches.get(shardId);
    if (entry === undefined) return;
    entry.closed = true;
    entry.watcher?.close();
    clearTimeout(entry.timer);
    this.watches.delete(shardId);
  }

  /** Watches exactly these shards (those the agent has adopted after a restart included). */
  sync(shardIds: Iterable<string>): void {
    const wanted = new Set(shardIds);
    for (const shardId of [...this.watches.keys()]) if (!wanted.has(shardId)) this.remove(shardId);
    for (const shardId of wanted) if (!this.watches.has(shardId)) this.add(shardId);
  }

  watching(shardId: string): boolean {
    return this.watches.has(shardId);
  }

  onModuleDestroy(): void {
    clearInterval(this.fallback);
    for (const shardId of [...this.watches.keys()]) this.remove(shardId);
  }

  private schedule(entry: Watch): void {
    if (entry.closed) return;
    if (entry.reading || entry.timer !== undefined) {
      entry.dirty = true;
      return;
    }
    const wait = entry.lastReadAt + MIN_READ_GAP_MS - performance.now();
    if (wait <= 0) {
      void this.read(entry);
      return;
    }
    entry.timer = setTimeout(() => {
      entry.timer = undefined;
      void this.read(entry);
    }, wait);
  }

  private async read(entry: Watch): Promise<void> {
    entry.reading = true;
    entry.dirty = false;
    entry.lastReadAt = performance.now();
    this.reads++;
    try {
      this.compare(entry, await readRegion(entry.path));
    } catch (error) {
      if (!(error instanceof RegionError && error.code === 'MISSING')) {
        this.logger.debug(
          { err: error, shardId: entry.shardId },
          'cannot read a region for its bells',
        );
      }
    } finally {
      entry.reading = false;
      if (entry.dirty) this.schedule(entry);
    }
  }

  private compare(entry: Watch, region: Region): void {
    if (entry.closed) return;
    const before = entry.wakeRequests ?? 0n;
    entry.wakeRequests = region.wakeRequests;
    // A wake that rang while the agent was away counts too: the control plane takes repeats.
    if (region.wakeRequests > before) {
      const ring = {
        shardId: entry.shardId,
        requests: region.wakeRequests,
        atNs: region.wakeRequestedNs,
      };
      for (const listener of this.wakeListeners) listener(ring);
    }
    const nowNs = process.hrtime.bigint();
    for (const device of region.devices) {
      const uuid = device.uuid;
      const seen = entry.pressure.get(uuid);
      entry.pressure.set(uuid, device.pressureCount);
      const rose =
        seen === undefined
          ? device.pressureCount > 0n && nowNs - device.pressureNs < FRESH_NS
          : device.pressureCount > seen;
      if (!rose) continue;
      const ring = {
        shardId: entry.shardId,
        gpuUuid: uuid,
        count: device.pressureCount,
        atNs: device.pressureNs,
      };
      for (const listener of this.pressureListeners) listener(ring);
    }
  }
}

import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';

import { CudaDriver } from './cuda.js';
import { mustRelist, processAlive, type GpuListing } from './listing-gate.js';
import { Nvml } from './nvml.js';
import type { NvmlProcessUtilization } from './process-utilization.js';
import type { SimulatedGpu } from './simulated-gpus.js';

export interface DiscoveredGpu {
  readonly index: number;
  readonly uuid: string;
  readonly model: string;
  /**
   * What shards can be given: the card's memory less what its driver and firmware set aside
   * (NVML v2's reserved bytes). Placing shards by the card's whole memory would let the last
   * one on a full card run out before its cap.
   */
  readonly totalBytes: number;
}

export interface GpuSample {
  readonly uuid: string;
  readonly usedBytes: number;
  readonly utilizationPercent?: number;
}

/** One process's memory on one GPU, as the driver reports it (host PIDs). */
export interface GpuProcessSample {
  readonly gpuUuid: string;
  readonly pid: number;
  readonly bytes: number;
}

/** One process's utilization sample on one GPU (host PIDs; NVML's per-process utilization). */
export type GpuUtilizationSample = NvmlProcessUtilization;

/** Where GPU facts come from: NVML (real or fake library), or a list given in configuration. */
export interface GpuBackend {
  readonly driverVersion: string;
  readonly cudaVersion: string;
  readonly gpus: readonly DiscoveredGpu[];
  sample(): GpuSample[];
  /**
   * Every process's memory on every GPU; undefined when nothing can tell (no driver). `watch`:
   * PIDs whose GPUs are listed afresh at every call while they are listed (processes the fence
   * killed), whatever else says nothing changed (listing-gate.ts); `fresh`: GPUs (UUIDs) listed
   * afresh at this call (a pressure ring on them).
   */
  processes(
    watch?: ReadonlySet<number>,
    fresh?: ReadonlySet<string>,
  ): GpuProcessSample[] | undefined;
  /**
   * Each process's utilization samples on GPU `gpuIndex` newer than `sinceUs` (microseconds
   * since the Unix epoch; 0: as far back as the driver keeps); 'unsupported' where nothing can
   * tell (no driver, or one without per-process utilization).
   */
  processUtilization(gpuIndex: number, sinceUs: number): GpuUtilizationSample[] | 'unsupported';
  /** The memory one CUDA context takes on this host's GPUs (the largest over them). */
  measureContextBytes(): number;
  close(): void;
}

/** What NvmlBackend's listing gate reads besides NVML (tests replace them). */
export interface ListingClock {
  readonly now: () => number;
  readonly alive: (pid: number) => boolean;
}

const NO_PIDS: ReadonlySet<number> = new Set();
const NO_GPUS: ReadonlySet<string> = new Set();

export class NvmlBackend implements GpuBackend {
  readonly driverVersion: string;
  readonly cudaVersion: string;
  readonly gpus: readonly DiscoveredGpu[];
  /** Each GPU's last listing (by index), reused while the gate says nothing changed. */
  private readonly listings = new Map<number, GpuListing<GpuProcessSample>>();
  /** GPU listings taken and reused, for the benchmark. */
  readonly listingCounts = { taken: 0, reused: 0 };

  constructor(
    private readonly nvml: Nvml,
    private readonly cudaLibrary: string,
    private readonly clock: ListingClock = { now: () => performance.now(), alive: processAlive },
  ) {
    this.driverVersion = nvml.driverVersion();
    this.cudaVersion = nvml.cudaVersion();
    const count = nvml.deviceCount();
    this.gpus = Array.from({ length: count }, (_, index) => {
      const device = nvml.device(index);
      return {
        index,
        uuid: device.uuid,
        model: device.name,
        totalBytes: device.totalBytes - device.reservedBytes,
      };
    });
  }

  sample(): GpuSample[] {
    return this.gpus.map((gpu) => {
      const utilizationPercent = this.nvml.utilizationPercent(gpu.index);
      return {
        uuid: gpu.uuid,
        usedBytes: this.nvml.memory(gpu.index).usedBytes,
        ...(utilizationPercent !== undefined ? { utilizationPercent } : {}),
      };
    });
  }

  processes(
    watch: ReadonlySet<number> = NO_PIDS,
    fresh: ReadonlySet<string> = NO_GPUS,
  ): GpuProcessSample[] | undefined {
    if (!this.nvml.listsProcesses) return undefined;
    const samples: GpuProcessSample[] = [];
    for (const gpu of this.gpus) {
      const usedBytes = this.nvml.memory(gpu.index).usedBytes;
      const now = this.clock.now();
      let listing = this.listings.get(gpu.index);
      if (fresh.has(gpu.uuid) || mustRelist(listing, usedBytes, now, watch, this.clock.alive)) {
        const processes = this.nvml.processes(gpu.index).map((process) => ({
          gpuUuid: gpu.uuid,
          pid: process.pid,
          bytes: process.usedBytes,
        }));
        listing = { usedBytes, at: now, processes };
        this.listings.set(gpu.index, listing);
        this.listingCounts.taken++;
      } else {
        this.listingCounts.reused++;
      }
      samples.push(...listing!.processes);
    }
    return samples;
  }

  processUtilization(gpuIndex: number, sinceUs: number): GpuUtilizationSample[] | 'unsupported' {
    return this.nvml.processUtilization(gpuIndex, sinceUs) ?? 'unsupported';
  }

  /**
   * Retains each GPU's primary context through libcuda and reads NVML's used memory before
   * and after: the difference is what a shard's process pays before allocating anything.
   */
  measureContextBytes(): number {
    if (this.gpus.length === 0) return 0;
    const cuda = CudaDriver.open(this.cudaLibrary);
    const ordinals = cuda.deviceUuids();
    let largest = 0;
    for (const gpu of this.gpus) {
      const ordinal = ordinals.get(gpu.uuid.toLowerCase());
      if (ordinal === undefined) {
        throw new Error(
          `${cuda.libraryPath} does not list GPU ${gpu.uuid} that NVML shows; cannot measure its context size`,
        );
      }
      const before = this.nvml.memory(gpu.index).usedBytes;
      const after = cuda.withPrimaryContext(ordinal, () => this.nvml.memory(gpu.index).usedBytes);
      largest = Math.max(largest, after - before);
    }
    return largest;
  }

  close(): void {
    this.nvml.close();
  }
}

/** GPUs that exist only in configuration (GPUSHARDS_SIMULATE_GPUS without fake libraries). */
export class ListedGpuBackend implements GpuBackend {
  readonly driverVersion = 'simulated';
  readonly cudaVersion = 'simulated';
  readonly gpus: readonly DiscoveredGpu[];

  constructor(hostId: string, gpus: readonly SimulatedGpu[]) {
    this.gpus = gpus.map((gpu, index) => ({
      index,
      uuid: simulatedUuid(hostId, index),
      model: gpu.model,
      totalBytes: gpu.totalBytes,
    }));
  }

  sample(): GpuSample[] {
    return this.gpus.map((gpu) => ({ uuid: gpu.uuid, usedBytes: 0 }));
  }

  processes(): undefined {
    return undefined;
  }

  processUtilization(): 'unsupported' {
    return 'unsupported';
  }

  measureContextBytes(): number {
    return 0;
  }

  close(): void {}
}

/** Stable across restarts of the same host, different between hosts. */
export function simulatedUuid(hostId: string, index: number): string {
  const hex = createHash('sha256').update(`gpushards-simulated:${hostId}:${index}`).digest('hex');
  return `GPU-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

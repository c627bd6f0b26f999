import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import type { GpuInfo } from '@gpushards/protocol';

import { MPS_SERVER_BYTES } from '../compute/mps-partition.js';
import { AGENT_CONFIG, DEFAULTS, type AgentConfig } from '../config/agent-options.js';
import type { SimulatedDriver } from '../containers/container-spec.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import {
  FAKE_LIBRARIES,
  FAKE_STATE_IN_CONTAINER,
  fakeDriverEnv,
  prepareFakeState,
} from './fake-driver.js';
import {
  ListedGpuBackend,
  NvmlBackend,
  type GpuBackend,
  type GpuProcessSample,
  type GpuSample,
  type GpuUtilizationSample,
} from './gpu-backends.js';
import { Nvml } from './nvml.js';

/** The host's GPUs as the agent registers them. */
export interface GpuInventory {
  readonly driverVersion: string;
  readonly cudaVersion: string;
  readonly simulated: boolean;
  readonly contextOverheadBytes: number;
  readonly gpus: readonly Omit<GpuInfo, 'usedBytes'>[];
}

/**
 * Discovers the GPUs once at start (NVML through koffi, or the simulated list), measures
 * the per-context size, and samples used memory and utilization for heartbeats.
 */
@Injectable()
export class GpusService implements OnModuleDestroy {
  readonly inventory: GpuInventory;
  /** Set in simulated mode with fake libraries: what shards get mounted instead of a real driver. */
  readonly simulatedDriver: SimulatedDriver | undefined;
  /**
   * False for GPUs listed in configuration only: no driver counts what shards allocate,
   * so a GPU's used memory is the sum of its shards' regions.
   */
  readonly driverCountsUsage: boolean;
  private readonly backend: GpuBackend;
  private readonly logger: Logger;

  constructor(@Inject(AGENT_CONFIG) config: AgentConfig, @Inject(LOGGER) logger: Logger) {
    this.logger = logger.child({ module: 'gpus' });
    const source = config.gpus;
    if (source.kind === 'nvml') {
      this.backend = new NvmlBackend(
        Nvml.open(source.nvmlLibrary ?? DEFAULTS.nvmlLibrary),
        source.cudaLibrary ?? DEFAULTS.cudaLibrary,
      );
    } else if (source.fakeLibraryDir !== undefined) {
      const cudaLibrary = join(source.fakeLibraryDir, FAKE_LIBRARIES.cuda);
      const nvmlLibrary = join(source.fakeLibraryDir, FAKE_LIBRARIES.nvml);
      for (const library of [cudaLibrary, nvmlLibrary]) {
        if (!existsSync(library)) {
          throw new Error(
            `GPUSHARDS_FAKE_LIBRARY_DIR has no ${library}: build native/ (cmake -S native -B native/build && cmake --build native/build)`,
          );
        }
      }
      mkdirSync(config.stateDir, { recursive: true });
      const stateFile = prepareFakeState(config.stateDir);
      // The fakes read their configuration from the environment when loaded: in this
      // process for discovery, and in every shard through the container's environment.
      Object.assign(process.env, fakeDriverEnv(source.gpus, stateFile, config.hostId));
      this.backend = new NvmlBackend(Nvml.open(nvmlLibrary), cudaLibrary);
      if (this.backend.gpus.length !== source.gpus.length) {
        throw new Error(
          `the fake driver in ${source.fakeLibraryDir} simulates ${this.backend.gpus.length} of the ${source.gpus.length} GPUs asked for (it reads GPUSHARDS_FAKE_GPUS once per process, at most 16 GPUs)`,
        );
      }
      this.simulatedDriver = {
        cudaLibrary,
        nvmlLibrary,
        stateFile,
        env: fakeDriverEnv(source.gpus, FAKE_STATE_IN_CONTAINER, config.hostId),
      };
    } else {
      this.logger.warn(
        'simulated GPUs without fake driver libraries (GPUSHARDS_FAKE_LIBRARY_DIR): shards get no CUDA driver',
      );
      this.backend = new ListedGpuBackend(config.hostId, source.gpus);
    }
    this.driverCountsUsage = this.backend instanceof NvmlBackend;
    const contextOverheadBytes = config.contextOverheadBytes ?? this.backend.measureContextBytes();
    this.inventory = {
      driverVersion: this.backend.driverVersion,
      cudaVersion: this.backend.cudaVersion,
      simulated: source.kind === 'simulated',
      contextOverheadBytes,
      gpus: this.backend.gpus.map((gpu) => ({
        uuid: gpu.uuid,
        index: gpu.index,
        model: gpu.model,
        totalBytes: gpu.totalBytes - (config.mps !== undefined ? MPS_SERVER_BYTES : 0),
      })),
    };
    this.logger.info(
      {
        gpus: this.inventory.gpus.map((gpu) => `${gpu.index}: ${gpu.model} ${gpu.uuid}`),
        driverVersion: this.inventory.driverVersion,
        cudaVersion: this.inventory.cudaVersion,
        simulated: this.inventory.simulated,
        contextOverheadBytes,
        measured: config.contextOverheadBytes === undefined,
      },
      'GPUs discovered',
    );
  }

  /** The host index of a GPU of this host, or undefined for a UUID this host does not have. */
  hostIndex(uuid: string): number | undefined {
    return this.inventory.gpus.find((gpu) => gpu.uuid === uuid)?.index;
  }

  /** The UUID as this host registered it (the region stores raw bytes, printed lowercase). */
  canonicalUuid(uuid: string): string {
    return (
      this.inventory.gpus.find((gpu) => gpu.uuid.toLowerCase() === uuid.toLowerCase())?.uuid ?? uuid
    );
  }

  sample(): GpuSample[] {
    return this.backend.sample();
  }

  /**
   * Every process's real memory per GPU (NVML); undefined where no driver can tell. A GPU's
   * last listing is reused while nothing says it changed (gpus/listing-gate.ts); `watch`: PIDs
   * whose GPUs are listed afresh while they are listed (processes the fence killed); `fresh`:
   * GPUs listed afresh at this call.
   */
  processes(
    watch?: ReadonlySet<number>,
    fresh?: ReadonlySet<string>,
  ): GpuProcessSample[] | undefined {
    return this.backend.processes(watch, fresh);
  }

  /**
   * Each process's utilization samples on GPU `gpuIndex` (host index) newer than `sinceUs`
   * (NVML's per-process utilization; the compute fence); 'unsupported' where nothing can tell.
   */
  processUtilization(gpuIndex: number, sinceUs: number): GpuUtilizationSample[] | 'unsupported' {
    return this.backend.processUtilization(gpuIndex, sinceUs);
  }

  onModuleDestroy(): void {
    try {
      this.backend.close();
    } catch (error) {
      this.logger.warn({ err: error }, 'NVML did not shut down cleanly');
    }
  }
}

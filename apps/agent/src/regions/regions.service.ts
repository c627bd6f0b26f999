import { promises as fs } from 'node:fs';
import { join } from 'node:path';

import { Inject, Injectable } from '@nestjs/common';
import type { GpuLimit } from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import type { IpcImports } from '../memory/ipc-imports.js';
import { RegionWatchService } from './region-watch.service.js';
import {
  readRegion,
  readRegionWithProcesses,
  RegionError,
  writeRegionLimit,
  type RegionDevice,
  type RegionWithProcesses,
} from './region-file.js';

/** The region file's name inside a shard's region folder (GPUSHARDS_REGION_PATH's base name). */
export const REGION_FILE = 'region';

/** A resize the region cannot take: the shard already holds more than the new cap. */
export class BelowUsageError extends Error {
  override name = 'BelowUsageError';
}

/**
 * Each shard's region folder on the host (bind-mounted into its container): created
 * before the container, read for usage, written for live resizes, removed on delete.
 *
 * The interposer creates the region file when the container's first CUDA process starts,
 * and adds a GPU's entry when a process first uses that GPU; a limit for an entry that
 * does not exist yet is kept here and written as soon as the entry appears (the library
 * takes a limit already in the region over its environment's).
 */
@Injectable()
export class RegionsService {
  private readonly logger: Logger;
  /** shardId → GPU UUID → limit not yet written (the entry did not exist). */
  private readonly pendingLimits = new Map<string, Map<string, number>>();

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly watch: RegionWatchService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'regions' });
  }

  folder(shardId: string): string {
    return join(this.config.regionRoot, shardId);
  }

  file(shardId: string): string {
    return join(this.folder(shardId), REGION_FILE);
  }

  /** Creates the shard's folder, writable by whatever user the container runs as. */
  async prepare(shardId: string): Promise<string> {
    await fs.mkdir(this.config.regionRoot, { recursive: true, mode: 0o711 });
    const folder = this.folder(shardId);
    await fs.mkdir(folder, { recursive: true });
    await fs.chmod(folder, 0o777);
    // Its bells (wake, pressure) from the first CUDA process on.
    this.watch.add(shardId);
    return folder;
  }

  async remove(shardId: string): Promise<void> {
    this.pendingLimits.delete(shardId);
    this.watch.remove(shardId);
    await fs.rm(this.folder(shardId), { recursive: true, force: true });
  }

  /**
   * The ACTIVE devices of a shard's region and the processes with a slot in it, from one read
   * of the whole file; both empty when no CUDA process has run yet.
   */
  async devicesAndProcesses(
    shardId: string,
  ): Promise<Pick<RegionWithProcesses, 'devices' | 'processes'>> {
    try {
      return await readRegionWithProcesses(this.file(shardId));
    } catch (error) {
      if (error instanceof RegionError && error.code === 'MISSING') {
        return { devices: [], processes: [] };
      }
      throw error;
    }
  }

  /**
   * The processes the shard's region marks as holding CUDA IPC imports (alive or not), and
   * whether one past the marked slots opened any; none when no CUDA process has run yet.
   */
  async ipcImports(shardId: string): Promise<IpcImports> {
    try {
      const region = await readRegionWithProcesses(this.file(shardId));
      return { importers: region.ipcImporters, unlisted: region.ipcImportersUnlisted };
    } catch (error) {
      if (error instanceof RegionError && error.code === 'MISSING') {
        return { importers: [], unlisted: false };
      }
      throw error;
    }
  }

  /** The ACTIVE devices of a shard's region; empty when no CUDA process has run yet. */
  async devices(shardId: string): Promise<readonly RegionDevice[]> {
    try {
      return (await readRegion(this.file(shardId))).devices;
    } catch (error) {
      if (error instanceof RegionError && error.code === 'MISSING') return [];
      throw error;
    }
  }

  /**
   * Sets new caps. With `refuseBelowUsage`, throws BelowUsageError and changes nothing
   * when a cap would be under what the shard holds now on that GPU.
   */
  async setLimits(
    shardId: string,
    gpus: readonly GpuLimit[],
    refuseBelowUsage: boolean,
  ): Promise<void> {
    const devices = await this.devices(shardId);
    if (refuseBelowUsage) {
      for (const gpu of gpus) {
        const device = devices.find((entry) => sameUuid(entry.uuid, gpu.uuid));
        if (device !== undefined && device.usedBytes > gpu.limitBytes) {
          throw new BelowUsageError(
            `shard ${shardId} holds ${device.usedBytes} bytes on ${gpu.uuid}, more than the new cap of ${gpu.limitBytes} bytes`,
          );
        }
      }
    }
    const pending = new Map<string, number>();
    for (const gpu of gpus) {
      const device = devices.find((entry) => sameUuid(entry.uuid, gpu.uuid));
      if (device?.limitBytes === gpu.limitBytes) continue;
      const written =
        device !== undefined &&
        (await writeRegionLimit(this.file(shardId), gpu.uuid, gpu.limitBytes));
      if (!written) pending.set(gpu.uuid, gpu.limitBytes);
      else
        this.logger.info(
          { shardId, gpu: gpu.uuid, limitBytes: gpu.limitBytes },
          'region limit written',
        );
    }
    if (pending.size > 0) this.pendingLimits.set(shardId, pending);
    else this.pendingLimits.delete(shardId);
  }

  /** Writes the limits that waited for their GPU entry; called with every heartbeat. */
  async applyPendingLimits(): Promise<void> {
    for (const [shardId, pending] of [...this.pendingLimits]) {
      const gpus = [...pending].map(([uuid, limitBytes]) => ({ uuid, limitBytes }));
      try {
        await this.setLimits(shardId, gpus, false);
      } catch (error) {
        this.logger.warn({ err: error, shardId }, 'could not write a pending region limit');
      }
    }
  }
}

function sameUuid(a: string, b: string): boolean {
  return a.toLowerCase() === b.toLowerCase();
}

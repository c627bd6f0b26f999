import { Inject, Injectable } from '@nestjs/common';
import type { ComputeShareSpec, GpuLimit, ShardLaunchSpec } from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { DockerRuntime, type ContainerEvent } from '../containers/docker-runtime.js';
import { containerName } from '../containers/labels.js';
import { LimitsService } from '../limits/limits.service.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { RegionsService } from '../regions/regions.service.js';
import { ContainerObserver } from './container-observer.js';
import {
  UnknownGpuError,
  UnknownShardError,
  type LaunchResult,
  type MemoryReport,
  type ShardRecord,
} from './shard-record.js';
import { ShardLauncher } from './shard-launcher.js';
import { ShardRegistry } from './shard-registry.js';
import type { StateDetails } from './state-reporter.js';

/**
 * The shards of this host and every operation on them, as the rest of the agent sees them:
 * launch (ShardLauncher), stop, delete, resize, the reconcile's repairs, and what Docker
 * reports (ContainerObserver). Operations on one shard run one at a time (ShardRegistry's
 * lock), so an event or a sweep never sees a shard half-way through an operation; an image
 * pull runs outside that lock, so a stop or delete can interrupt a launch that waits for it.
 */
@Injectable()
export class ShardsService {
  private readonly logger: Logger;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly docker: DockerRuntime,
    private readonly regions: RegionsService,
    private readonly limits: LimitsService,
    private readonly registry: ShardRegistry,
    private readonly launcher: ShardLauncher,
    private readonly observer: ContainerObserver,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shards' });
  }

  list(): readonly Readonly<ShardRecord>[] {
    return this.registry.list();
  }

  get(shardId: string): Readonly<ShardRecord> | undefined {
    return this.registry.get(shardId);
  }

  /** See ShardRegistry.reportMemory; nothing when the agent no longer knows the shard. */
  async reportMemory(
    shardId: string,
    state: MemoryReport,
    details: StateDetails = {},
  ): Promise<void> {
    const record = this.registry.get(shardId);
    if (record !== undefined) await this.registry.reportMemory(record, state, details);
  }

  /** Notes that a command for this shard arrived (the reconcile ordering rule). */
  noteCommand(shardId: string): void {
    this.registry.noteCommand(shardId);
  }

  /** A mark to take before sending a reconcile or register request. */
  commandMark(): number {
    return this.registry.commandMark();
  }

  /** Shards that received a command after `mark`: a reply to a request sent at `mark` may predate it. */
  commandedSince(mark: number): Set<string> {
    return this.registry.commandedSince(mark);
  }

  /** See ShardLauncher.launch. */
  launch(spec: ShardLaunchSpec): Promise<LaunchResult> {
    return this.launcher.launch(spec);
  }

  /** Stops the shard's container (SIGTERM, SIGKILL after the grace), keeping it. */
  stop(shardId: string, graceSeconds: number): Promise<{ wasRunning: boolean }> {
    return this.registry.exclusive(shardId, async () => {
      const record = this.registry.get(shardId);
      if (record === undefined) return { wasRunning: false };
      if (record.pull !== undefined) {
        record.pull.abort();
        record.pull = undefined;
      }
      let wasRunning = false;
      const details: StateDetails = {};
      if (record.containerId !== undefined) {
        wasRunning = await this.docker.stopContainer(record.containerId, graceSeconds);
        const status = await this.docker.status(record.containerId);
        Object.assign(
          details,
          { containerId: record.containerId },
          status ? { exitCode: status.exitCode } : {},
        );
      }
      // Also when it was stopped already: a stop sent again may be for a shard whose STOPPED
      // event went to no one (a control plane that restarted resends those in flight).
      await this.registry.report(record, 'STOPPED', details);
      return { wasRunning };
    });
  }

  /** Removes the shard's container and region folder; the agent forgets the shard. */
  delete(shardId: string): Promise<{ removed: boolean }> {
    return this.registry.exclusive(shardId, async () => {
      const record = this.registry.get(shardId);
      record?.pull?.abort();
      let removed = false;
      if (record?.containerId !== undefined)
        removed = await this.docker.removeContainer(record.containerId);
      // A container this agent does not track (created by an earlier run that crashed
      // mid-launch) goes too: there is one container name per shard.
      removed =
        (await this.docker.removeContainer(containerName(this.config.hostId, shardId))) || removed;
      await this.regions.remove(shardId);
      await this.limits.remove(shardId);
      this.registry.forget(shardId);
      if (removed) this.logger.info({ shardId, teamId: record?.teamId }, 'shard deleted');
      return { removed };
    });
  }

  /**
   * New caps (and compute share, when given) for a shard's GPUs, live: throws
   * UnknownShardError, UnknownGpuError, BelowUsageError.
   */
  resize(shardId: string, gpus: readonly GpuLimit[], compute?: ComputeShareSpec): Promise<void> {
    return this.registry.exclusive(shardId, async () => {
      const record = this.registry.get(shardId);
      if (record === undefined)
        throw new UnknownShardError(`shard ${shardId} is not on host ${this.config.hostId}`);
      const foreign = gpus.filter((gpu) => !record.gpuUuids.includes(gpu.uuid));
      if (foreign.length > 0) {
        throw new UnknownGpuError(
          `shard ${shardId} does not use ${foreign.map((gpu) => gpu.uuid).join(', ')} (it uses ${record.gpuUuids.join(', ')})`,
        );
      }
      await this.regions.setLimits(shardId, gpus, true);
      await this.limits.setLimits(shardId, gpus, undefined, compute);
      this.logger.info({ shardId, teamId: record.teamId, gpus, compute }, 'shard resized');
    });
  }

  /** See ContainerObserver.onContainerEvent. */
  onContainerEvent(event: ContainerEvent): Promise<void> {
    return this.observer.onContainerEvent(event);
  }

  /** See ContainerObserver.sweep. */
  sweep(): Promise<void> {
    return this.observer.sweep();
  }

  /** Resumes a paused shard container (reconcile: a shard that should run). */
  unpause(shardId: string): Promise<void> {
    return this.registry.exclusive(shardId, async () => {
      const record = this.registry.get(shardId);
      if (record?.containerId === undefined) return;
      await this.docker.unpauseContainer(record.containerId);
      record.observed = 'running';
      if (record.state !== 'RUNNING') {
        await this.registry.report(record, 'RUNNING', { containerId: record.containerId });
      }
    });
  }

  /**
   * Removes a dead container and reports the shard FAILED (reconcile); the agent keeps the
   * shard, so the control plane's next answer decides what follows.
   */
  discardContainer(shardId: string): Promise<void> {
    return this.registry.exclusive(shardId, async () => {
      const record = this.registry.get(shardId);
      if (record?.containerId === undefined) return;
      const containerId = record.containerId;
      await this.docker.removeContainer(containerId);
      record.containerId = undefined;
      record.observed = 'absent';
      if (record.state !== 'FAILED') {
        await this.registry.report(record, 'FAILED', {
          containerId,
          reason: 'its container was dead',
        });
      }
    });
  }

  /** Writes the desired caps of a running shard into its region (reconcile). */
  applyLimits(spec: ShardLaunchSpec): Promise<void> {
    return this.registry.exclusive(spec.shardId, async () => {
      if (this.registry.get(spec.shardId)?.state !== 'RUNNING') return;
      await this.limits.setLimits(spec.shardId, spec.gpus, spec.capPolicy, spec.compute);
      await this.regions.setLimits(spec.shardId, spec.gpus, false);
    });
  }
}

import { Inject, Injectable } from '@nestjs/common';
import {
  errorMessage,
  stripReservedEnvKeys,
  type GpuLimit,
  type ShardLaunchSpec,
} from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { orderGpus, type ShardGpu } from '../containers/container-spec.js';
import { DockerRuntime } from '../containers/docker-runtime.js';
import { containerName } from '../containers/labels.js';
import type { PullProgress } from '../containers/pull-progress.js';
import { GpusService } from '../gpus/gpus.service.js';
import { LimitsService } from '../limits/limits.service.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { RegionsService } from '../regions/regions.service.js';
import { ContainerSetup } from './container-setup.js';
import { UnknownGpuError, type LaunchResult, type ShardRecord } from './shard-record.js';
import { ShardRegistry } from './shard-registry.js';
import { StateReporter } from './state-reporter.js';

/** PULLING events at most this often, apart from the first. */
const PULL_PROGRESS_INTERVAL_MS = 500;

/**
 * Launching a shard: the image pulled when missing (outside the shard's lock, so a stop or
 * delete can interrupt the wait), then its container created and started (ContainerSetup
 * writes what it is given), each step reported as the shard's state.
 */
@Injectable()
export class ShardLauncher {
  private readonly logger: Logger;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly docker: DockerRuntime,
    private readonly regions: RegionsService,
    private readonly limits: LimitsService,
    private readonly gpus: GpusService,
    private readonly setup: ContainerSetup,
    private readonly reporter: StateReporter,
    private readonly registry: ShardRegistry,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shards' });
  }

  /** Throws UnknownGpuError unless every GPU of the spec is one of this host's. */
  checkGpus(gpus: readonly GpuLimit[]): ShardGpu[] {
    return gpus.map((gpu) => {
      const hostIndex = this.gpus.hostIndex(gpu.uuid);
      if (hostIndex === undefined) {
        throw new UnknownGpuError(
          `GPU ${gpu.uuid} is not on host ${this.config.hostId} (it has ${this.gpus.inventory.gpus.map((g) => g.uuid).join(', ') || 'no GPUs'})`,
        );
      }
      return { uuid: gpu.uuid, limitBytes: gpu.limitBytes, hostIndex };
    });
  }

  /**
   * Makes the shard run with this spec. Resolves once the launch is taken on: RUNNING when
   * the image was there, PULLING when it is being pulled (the outcome follows as events),
   * FAILED (with a FAILED event giving the reason) when this host cannot run it as asked: an
   * isolated shard on a host without an MPS partition, or one too large for it.
   * A running shard stays as it is (its caps updated): launching twice starts nothing twice.
   */
  launch(spec: ShardLaunchSpec): Promise<LaunchResult> {
    const gpus = this.checkGpus(spec.gpus);
    const { env, stripped } = stripReservedEnvKeys(spec.env);
    if (stripped.length > 0) {
      this.logger.warn(
        { shardId: spec.shardId, teamId: spec.teamId, stripped },
        'stripped reserved environment variables',
      );
    }
    return this.registry.exclusive(spec.shardId, async () => {
      const record = this.registry.get(spec.shardId);
      if (record?.state === 'PULLING' || record?.state === 'STARTING') {
        return {
          state: record.state,
          ...(record.containerId ? { containerId: record.containerId } : {}),
        };
      }
      if (record?.state === 'RUNNING' && record.containerId !== undefined) {
        await this.limits.setLimits(spec.shardId, spec.gpus, spec.capPolicy, spec.compute);
        await this.regions.setLimits(spec.shardId, spec.gpus, false);
        // Told again: a launch sent again (a control plane that restarted resends those in
        // flight) may be for a shard whose RUNNING event went to no one. Settled now, not at
        // the next reconcile; a control plane that has it RUNNING already only notes it.
        await this.registry.report(record, 'RUNNING', { containerId: record.containerId });
        return { state: 'RUNNING', containerId: record.containerId };
      }
      const next: ShardRecord = {
        shardId: spec.shardId,
        teamId: spec.teamId,
        state: 'STARTING',
        gpuUuids: orderGpus(gpus).map((gpu) => gpu.uuid),
      };
      if (record?.containerId !== undefined) await this.docker.removeContainer(record.containerId);
      this.registry.set(next);
      // Never run as another kind of shard than it asked to be: FAILED, with the reason.
      const refusal = this.setup.refusal(spec);
      if (refusal !== undefined) {
        this.logger.warn({ shardId: spec.shardId, reason: refusal }, 'launch refused');
        await this.registry.fail(next, refusal);
        return { state: 'FAILED' };
      }
      let present: boolean;
      try {
        present = await this.docker.imagePresent(spec.image);
      } catch (error) {
        await this.registry.fail(next, errorMessage(error));
        throw error;
      }
      if (!present) {
        next.state = 'PULLING';
        next.pull = new AbortController();
        await this.registry.report(next, 'PULLING', { progress: { completedBytes: 0 } });
        void this.pullThenStart(next, next.pull.signal, spec, gpus, env);
        return { state: 'PULLING' };
      }
      const containerId = await this.createAndStart(next, spec, gpus, env);
      return { state: 'RUNNING', containerId };
    });
  }

  private async pullThenStart(
    record: ShardRecord,
    signal: AbortSignal,
    spec: ShardLaunchSpec,
    gpus: readonly ShardGpu[],
    env: Record<string, string>,
  ): Promise<void> {
    let lastReport = Date.now();
    let latest: PullProgress | undefined;
    let reported: PullProgress | undefined;
    const onProgress = (progress: PullProgress): void => {
      latest = progress;
      if (signal.aborted || Date.now() - lastReport < PULL_PROGRESS_INTERVAL_MS) return;
      lastReport = Date.now();
      reported = progress;
      void this.reporter.report(record.shardId, record.teamId, 'PULLING', { progress });
    };
    let pullError: unknown;
    try {
      await this.docker.pullImage(spec.image, onProgress);
      // The whole download, whatever the throttle left out.
      if (latest !== undefined && latest !== reported && !signal.aborted) {
        await this.reporter.report(record.shardId, record.teamId, 'PULLING', { progress: latest });
      }
    } catch (error) {
      pullError = error;
    }
    await this.registry
      .exclusive(record.shardId, async () => {
        // A stop, delete or newer launch took the shard over while the image came.
        if (signal.aborted || this.registry.get(record.shardId) !== record) return;
        record.pull = undefined;
        if (pullError !== undefined) {
          await this.registry.fail(record, `image pull failed: ${errorMessage(pullError)}`);
          return;
        }
        await this.createAndStart(record, spec, gpus, env);
      })
      .catch((error: unknown) =>
        this.logger.warn({ err: error, shardId: record.shardId }, 'launch after pull failed'),
      );
  }

  /** Creates and starts the container; on failure reports FAILED, removes what it made, rethrows. */
  private async createAndStart(
    record: ShardRecord,
    spec: ShardLaunchSpec,
    gpus: readonly ShardGpu[],
    env: Record<string, string>,
  ): Promise<string> {
    await this.registry.report(record, 'STARTING');
    try {
      await this.docker.removeContainer(containerName(this.config.hostId, spec.shardId));
      const options = await this.setup.prepare(spec, gpus, env);
      record.containerId = await this.docker.createContainer(options);
      record.observed = 'created';
      await this.docker.startContainer(record.containerId);
      record.observed = 'running';
    } catch (error) {
      const containerId = record.containerId;
      record.containerId = undefined;
      record.observed = 'absent';
      if (containerId !== undefined) {
        await this.docker
          .removeContainer(containerId)
          .catch((cleanup: unknown) =>
            this.logger.warn(
              { err: cleanup, containerId },
              'could not remove a container that failed to start',
            ),
          );
      }
      await this.registry.fail(record, errorMessage(error));
      throw error;
    }
    await this.registry.report(record, 'RUNNING', { containerId: record.containerId });
    return record.containerId;
  }
}

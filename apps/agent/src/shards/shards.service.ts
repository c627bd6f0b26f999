import { Inject, Injectable } from '@nestjs/common';
import { observationOf } from '@gpushards/limits';
import {
  stripReservedEnvKeys,
  type ComputeShareSpec,
  type GpuLimit,
  type ShardLaunchSpec,
  type ShardState,
} from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { KeyedMutex } from '../common/keyed-mutex.js';
import { errorMessage } from '@gpushards/protocol';
import { orderGpus, type ShardGpu } from '../containers/container-spec.js';
import {
  DockerRuntime,
  type ContainerEvent,
  type ShardContainer,
} from '../containers/docker-runtime.js';
import { containerName } from '../containers/labels.js';
import type { PullProgress } from '../containers/pull-progress.js';
import { GpusService } from '../gpus/gpus.service.js';
import { LimitsService } from '../limits/limits.service.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { RegionsService } from '../regions/regions.service.js';
import { ContainerSetup } from './container-setup.js';
import {
  UnknownGpuError,
  UnknownShardError,
  type LaunchResult,
  type ShardRecord,
} from './shard-record.js';
import { StateReporter, type StateDetails } from './state-reporter.js';

/** PULLING events at most this often, apart from the first. */
const PULL_PROGRESS_INTERVAL_MS = 500;

/**
 * The shards of this host and every operation on them: launch, stop, delete, resize, and
 * what Docker reports. Operations on one shard run one at a time (KeyedMutex), so an event
 * or a sweep never sees a shard half-way through an operation; an image pull runs outside
 * that lock, so a stop or delete can interrupt a launch that waits for its image.
 */
@Injectable()
export class ShardsService {
  private readonly records = new Map<string, ShardRecord>();
  private readonly mutex = new KeyedMutex();
  private readonly logger: Logger;
  /** Counts commands received; see commandMark(). */
  private commandCount = 0;
  private readonly lastCommand = new Map<string, number>();

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly docker: DockerRuntime,
    private readonly regions: RegionsService,
    private readonly limits: LimitsService,
    private readonly gpus: GpusService,
    private readonly setup: ContainerSetup,
    private readonly reporter: StateReporter,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shards' });
  }

  list(): readonly Readonly<ShardRecord>[] {
    return [...this.records.values()];
  }

  /** Notes that a command for this shard arrived (the reconcile ordering rule). */
  noteCommand(shardId: string): void {
    this.lastCommand.set(shardId, ++this.commandCount);
  }

  /** A mark to take before sending a reconcile or register request. */
  commandMark(): number {
    return this.commandCount;
  }

  /** Shards that received a command after `mark`: a reply to a request sent at `mark` may predate it. */
  commandedSince(mark: number): Set<string> {
    return new Set([...this.lastCommand].filter(([, at]) => at > mark).map(([shardId]) => shardId));
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
    return this.mutex.run(spec.shardId, async () => {
      const record = this.records.get(spec.shardId);
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
        await this.report(record, 'RUNNING', { containerId: record.containerId });
        return { state: 'RUNNING', containerId: record.containerId };
      }
      const next: ShardRecord = {
        shardId: spec.shardId,
        teamId: spec.teamId,
        state: 'STARTING',
        gpuUuids: orderGpus(gpus).map((gpu) => gpu.uuid),
      };
      if (record?.containerId !== undefined) await this.docker.removeContainer(record.containerId);
      this.records.set(spec.shardId, next);
      // Never run as another kind of shard than it asked to be: FAILED, with the reason.
      const refusal = this.setup.refusal(spec);
      if (refusal !== undefined) {
        this.logger.warn({ shardId: spec.shardId, reason: refusal }, 'launch refused');
        await this.fail(next, refusal);
        return { state: 'FAILED' };
      }
      let present: boolean;
      try {
        present = await this.docker.imagePresent(spec.image);
      } catch (error) {
        await this.fail(next, errorMessage(error));
        throw error;
      }
      if (!present) {
        next.state = 'PULLING';
        next.pull = new AbortController();
        await this.report(next, 'PULLING', { progress: { completedBytes: 0 } });
        void this.pullThenStart(next, next.pull.signal, spec, gpus, env);
        return { state: 'PULLING' };
      }
      const containerId = await this.createAndStart(next, spec, gpus, env);
      return { state: 'RUNNING', containerId };
    });
  }

  /** Stops the shard's container (SIGTERM, SIGKILL after the grace), keeping it. */
  stop(shardId: string, graceSeconds: number): Promise<{ wasRunning: boolean }> {
    return this.mutex.run(shardId, async () => {
      const record = this.records.get(shardId);
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
      await this.report(record, 'STOPPED', details);
      return { wasRunning };
    });
  }

  /** Removes the shard's container and region folder; the agent forgets the shard. */
  delete(shardId: string): Promise<{ removed: boolean }> {
    return this.mutex.run(shardId, async () => {
      const record = this.records.get(shardId);
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
      this.records.delete(shardId);
      this.lastCommand.delete(shardId);
      if (removed) this.logger.info({ shardId, teamId: record?.teamId }, 'shard deleted');
      return { removed };
    });
  }

  /**
   * New caps (and compute share, when given) for a shard's GPUs, live: throws
   * UnknownShardError, UnknownGpuError, BelowUsageError.
   */
  resize(shardId: string, gpus: readonly GpuLimit[], compute?: ComputeShareSpec): Promise<void> {
    return this.mutex.run(shardId, async () => {
      const record = this.records.get(shardId);
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

  /** Applies what Docker reported about a container of this host. */
  onContainerEvent(event: ContainerEvent): Promise<void> {
    return this.mutex.run(event.shardId, async () => {
      const record = this.records.get(event.shardId);
      // Events of containers the agent replaced or removed itself find no record for them.
      if (record === undefined || record.containerId !== event.containerId) return;
      if (event.action === 'die') {
        record.observed = 'exited';
        record.exitCode = event.exitCode ?? record.exitCode;
      } else if (event.action === 'start') {
        record.observed = 'running';
      }
      if (event.action === 'die' && record.state === 'RUNNING') {
        await this.report(record, 'EXITED', {
          containerId: event.containerId,
          ...(event.exitCode !== undefined ? { exitCode: event.exitCode } : {}),
        });
      } else if (event.action === 'destroy') {
        record.containerId = undefined;
        record.observed = 'absent';
        await this.report(record, 'VANISHED', {
          containerId: event.containerId,
          reason: 'the container was removed by something other than the agent',
        });
      } else if (
        event.action === 'start' &&
        record.state !== 'RUNNING' &&
        record.state !== 'STARTING'
      ) {
        await this.report(record, 'RUNNING', { containerId: event.containerId });
      }
    });
  }

  /**
   * Compares what the agent believes with what Docker has, for missed events: adopts shard
   * containers it does not know (after a restart), reports containers that exited or
   * vanished, and removes duplicates. Returns after every shard was looked at.
   */
  async sweep(): Promise<void> {
    const listed = await this.docker.listShardContainers(this.config.hostId);
    const byShard = new Map<string, ShardContainer[]>();
    for (const container of listed) {
      byShard.set(container.shardId, [...(byShard.get(container.shardId) ?? []), container]);
    }
    const shardIds = new Set([...this.records.keys(), ...byShard.keys()]);
    await Promise.all(
      [...shardIds].map((shardId) =>
        this.mutex
          .run(shardId, () => this.sweepOne(shardId, byShard.get(shardId) ?? []))
          .catch((error: unknown) =>
            this.logger.warn({ err: error, shardId }, 'could not check a shard container'),
          ),
      ),
    );
  }

  /** Resumes a paused shard container (reconcile: a shard that should run). */
  unpause(shardId: string): Promise<void> {
    return this.mutex.run(shardId, async () => {
      const record = this.records.get(shardId);
      if (record?.containerId === undefined) return;
      await this.docker.unpauseContainer(record.containerId);
      record.observed = 'running';
      if (record.state !== 'RUNNING') {
        await this.report(record, 'RUNNING', { containerId: record.containerId });
      }
    });
  }

  /**
   * Removes a dead container and reports the shard FAILED (reconcile); the agent keeps the
   * shard, so the control plane's next answer decides what follows.
   */
  discardContainer(shardId: string): Promise<void> {
    return this.mutex.run(shardId, async () => {
      const record = this.records.get(shardId);
      if (record?.containerId === undefined) return;
      const containerId = record.containerId;
      await this.docker.removeContainer(containerId);
      record.containerId = undefined;
      record.observed = 'absent';
      if (record.state !== 'FAILED') {
        await this.report(record, 'FAILED', { containerId, reason: 'its container was dead' });
      }
    });
  }

  /** Writes the desired caps of a running shard into its region (reconcile). */
  applyLimits(spec: ShardLaunchSpec): Promise<void> {
    return this.mutex.run(spec.shardId, async () => {
      if (this.records.get(spec.shardId)?.state !== 'RUNNING') return;
      await this.limits.setLimits(spec.shardId, spec.gpus, spec.capPolicy, spec.compute);
      await this.regions.setLimits(spec.shardId, spec.gpus, false);
    });
  }

  private async sweepOne(shardId: string, containers: readonly ShardContainer[]): Promise<void> {
    const record = this.records.get(shardId);
    if (record?.pull !== undefined || record?.state === 'STARTING') return;
    const tracked = record?.containerId;
    const keep =
      containers.find((c) => c.id === tracked) ??
      containers.find((c) => c.running) ??
      containers[0];
    for (const duplicate of containers.filter((c) => c !== keep)) {
      this.logger.warn(
        { shardId, containerId: duplicate.id },
        'removing a duplicate container of a shard',
      );
      await this.docker.removeContainer(duplicate.id);
    }
    if (record === undefined || tracked === undefined) {
      if (keep === undefined) return;
      const status = await this.docker.status(keep.id);
      if (status === undefined) return;
      // Adopted: a shard container of this host that the agent did not know (it restarted).
      const observed = observationOf(status.state, status.exitCode);
      this.records.set(shardId, {
        shardId,
        teamId: keep.teamId,
        containerId: keep.id,
        state: status.running ? 'RUNNING' : (record?.state ?? 'EXITED'),
        observed: observed.kind,
        exitCode: status.exitCode,
        gpuUuids: keep.gpuUuids,
      });
      this.logger.info(
        { shardId, teamId: keep.teamId, containerId: keep.id, status: status.state },
        'adopted a shard container',
      );
      return;
    }
    const status = await this.docker.status(tracked);
    record.observed = status === undefined ? 'absent' : observationOf(status.state).kind;
    if (status !== undefined) record.exitCode = status.exitCode;
    if (status === undefined) {
      record.containerId = undefined;
      await this.report(record, 'VANISHED', {
        containerId: tracked,
        reason: 'the container is gone and the agent did not remove it',
      });
    } else if (!status.running && record.state === 'RUNNING') {
      await this.report(record, 'EXITED', { containerId: tracked, exitCode: status.exitCode });
    } else if (status.running && record.state !== 'RUNNING') {
      await this.report(record, 'RUNNING', { containerId: tracked });
    }
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
    await this.mutex
      .run(record.shardId, async () => {
        // A stop, delete or newer launch took the shard over while the image came.
        if (signal.aborted || this.records.get(record.shardId) !== record) return;
        record.pull = undefined;
        if (pullError !== undefined) {
          await this.fail(record, `image pull failed: ${errorMessage(pullError)}`);
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
    await this.report(record, 'STARTING');
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
      await this.fail(record, errorMessage(error));
      throw error;
    }
    await this.report(record, 'RUNNING', { containerId: record.containerId });
    return record.containerId;
  }

  private async fail(record: ShardRecord, reason: string): Promise<void> {
    await this.report(record, 'FAILED', { reason });
  }

  private async report(
    record: ShardRecord,
    state: ShardState,
    details: StateDetails = {},
  ): Promise<void> {
    record.state = state;
    // A reconcile reply to a request sent before this change may not reflect it.
    this.lastCommand.set(record.shardId, ++this.commandCount);
    await this.reporter.report(record.shardId, record.teamId, state, details);
  }
}

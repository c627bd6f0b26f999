import { Inject, Injectable } from '@nestjs/common';
import { observationOf } from '@gpushards/limits';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import {
  DockerRuntime,
  type ContainerEvent,
  type ShardContainer,
} from '../containers/docker-runtime.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { ShardRegistry } from './shard-registry.js';

/**
 * What Docker says of this host's shard containers, taken into the shards' records and
 * reported: its events as they come, and a sweep for the events missed (after a restart,
 * or lost), which adopts containers the agent does not know and removes duplicates.
 */
@Injectable()
export class ContainerObserver {
  private readonly logger: Logger;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly docker: DockerRuntime,
    private readonly registry: ShardRegistry,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shards' });
  }

  /** Applies what Docker reported about a container of this host. */
  onContainerEvent(event: ContainerEvent): Promise<void> {
    return this.registry.exclusive(event.shardId, async () => {
      const record = this.registry.get(event.shardId);
      // Events of containers the agent replaced or removed itself find no record for them.
      if (record === undefined || record.containerId !== event.containerId) return;
      if (event.action === 'die') {
        record.observed = 'exited';
        record.exitCode = event.exitCode ?? record.exitCode;
      } else if (event.action === 'start') {
        record.observed = 'running';
      }
      if (event.action === 'die' && record.state === 'RUNNING') {
        await this.registry.report(record, 'EXITED', {
          containerId: event.containerId,
          ...(event.exitCode !== undefined ? { exitCode: event.exitCode } : {}),
        });
      } else if (event.action === 'destroy') {
        record.containerId = undefined;
        record.observed = 'absent';
        await this.registry.report(record, 'VANISHED', {
          containerId: event.containerId,
          reason: 'the container was removed by something other than the agent',
        });
      } else if (
        event.action === 'start' &&
        record.state !== 'RUNNING' &&
        record.state !== 'STARTING'
      ) {
        await this.registry.report(record, 'RUNNING', { containerId: event.containerId });
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
    const shardIds = new Set([...this.registry.shardIds(), ...byShard.keys()]);
    await Promise.all(
      [...shardIds].map((shardId) =>
        this.registry
          .exclusive(shardId, () => this.sweepOne(shardId, byShard.get(shardId) ?? []))
          .catch((error: unknown) =>
            this.logger.warn({ err: error, shardId }, 'could not check a shard container'),
          ),
      ),
    );
  }

  private async sweepOne(shardId: string, containers: readonly ShardContainer[]): Promise<void> {
    const record = this.registry.get(shardId);
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
      this.registry.set({
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
      await this.registry.report(record, 'VANISHED', {
        containerId: tracked,
        reason: 'the container is gone and the agent did not remove it',
      });
    } else if (!status.running && record.state === 'RUNNING') {
      await this.registry.report(record, 'EXITED', {
        containerId: tracked,
        exitCode: status.exitCode,
      });
    } else if (status.running && record.state !== 'RUNNING') {
      await this.registry.report(record, 'RUNNING', { containerId: tracked });
    }
  }
}

import { Inject, Injectable } from '@nestjs/common';
import { MAX_SHARDS_PER_HOST, type ShardLaunchSpec } from '@gpushards/protocol';
import { RUNNABLE_STATES, SUSPENDED_STATES } from '@gpushards/limits';
import { PrismaService, type ShardState } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { SecretsKeyError } from '../secrets/secret-box.js';
import { tryLaunchSpecOf } from '../shards/launch-spec.js';
import { ShardLifecycle } from '../shards/shard-lifecycle.js';
import { failUnopenableLaunches } from '../shards/unopenable-launches.js';
import {
  hostsWithShardsIn,
  newestShardIds,
  runnableShards,
  type ShardWithGpus,
} from './fleet-statements.js';

/** What the agent should run and keep stopped: the body of register and reconcile replies. */
export interface DesiredState {
  readonly desired: ShardLaunchSpec[];
  readonly stoppedShardIds: string[];
  /** Shards whose container runs with its GPU memory in host RAM (docs/elastic.md). */
  readonly suspendedShardIds?: string[];
  /** Launched shards whose spec cannot be given here (their secrets do not open): left alone. */
  readonly keptShardIds?: string[];
}

/** Shards the agent must keep stopped (containers kept), newest first, bounded by the protocol. */
export const STOPPED_FOR_AGENT: readonly ShardState[] = [
  'STOPPING',
  'STOPPED',
  'EXITED',
  'FAILED',
  'LOST',
];

/** Every state a shard listed in a reply is in: a host with none of these gets an empty reply. */
const LISTED_STATES: readonly ShardState[] = [
  ...new Set([...RUNNABLE_STATES, ...STOPPED_FOR_AGENT, ...SUSPENDED_STATES]),
];

/** What a host with no shard to list is told: run nothing, keep nothing stopped. */
const NOTHING: DesiredState = { desired: [], stoppedShardIds: [] };

/**
 * What should run on a host, as register and reconcile replies say it (PLACED, STARTING,
 * RUNNING with their caps; the newest stopped and suspended shards).
 */
@Injectable()
export class DesiredShards {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly lifecycle: ShardLifecycle,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fleet' });
  }

  /**
   * What should run on the host (PLACED, STARTING, RUNNING, with their caps) and which shards
   * must stay stopped with their containers kept (the newest, up to the protocol's bound);
   * the agent removes any other shard container.
   *
   * A shard whose secret env does not open here (a key this control plane does not hold) has
   * no spec to send. Not launched yet, it FAILS (its GPUs freed). Launched, its container has
   * its environment: it is listed as kept (left as it is) to an agent that `acceptsKept`;
   * to an older agent, which would remove it, the whole answer is refused (SecretsKeyError).
   */
  async desiredShardsFor(hostId: string, acceptsKept: boolean): Promise<DesiredState> {
    const runnable = await runnableShards(this.prisma.direct, hostId, RUNNABLE_STATES);
    const stopped = await newestShardIds(this.prisma.direct, hostId, STOPPED_FOR_AGENT);
    const suspendedIds = await newestShardIds(this.prisma.direct, hostId, SUSPENDED_STATES);
    return this.desiredFrom(hostId, acceptsKept, runnable, stopped, suspendedIds);
  }

  /**
   * desiredShardsFor for many hosts, one after the other: a host with no shard to list (every
   * host of a fleet that registers for the first time) costs no read of its own, one
   * statement finds them all. A host's error (SecretsKeyError) is its own, in its place.
   */
  async desiredShardsForMany(
    hosts: readonly { hostId: string; acceptsKept: boolean }[],
  ): Promise<PromiseSettledResult<DesiredState>[]> {
    const withShards = await hostsWithShardsIn(
      this.prisma.direct,
      hosts.map((host) => host.hostId),
      LISTED_STATES,
    );
    const results: PromiseSettledResult<DesiredState>[] = [];
    for (const { hostId, acceptsKept } of hosts) {
      if (!withShards.has(hostId)) {
        results.push({ status: 'fulfilled', value: NOTHING });
        continue;
      }
      try {
        results.push({
          status: 'fulfilled',
          value: await this.desiredShardsFor(hostId, acceptsKept),
        });
      } catch (reason) {
        results.push({ status: 'rejected', reason });
      }
    }
    return results;
  }

  /** desiredShardsFor from a reconcile's read of the host (readHostForReconcile). */
  desiredOf(
    hostId: string,
    acceptsKept: boolean,
    shards: readonly ShardWithGpus[],
    stopped: string[],
  ): Promise<DesiredState> {
    // As runnableShards and newestShardIds order and bound them.
    const runnable = shards
      .filter((shard) => RUNNABLE_STATES.includes(shard.state))
      .slice(0, MAX_SHARDS_PER_HOST);
    const suspendedIds = shards
      .filter((shard) => SUSPENDED_STATES.includes(shard.state))
      .sort(
        (a, b) =>
          b.updatedAt.getTime() - a.updatedAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
      )
      .slice(0, MAX_SHARDS_PER_HOST)
      .map((shard) => shard.id);
    return this.desiredFrom(hostId, acceptsKept, runnable, stopped, suspendedIds);
  }

  private async desiredFrom(
    hostId: string,
    acceptsKept: boolean,
    runnable: readonly ShardWithGpus[],
    stopped: string[],
    suspendedIds: string[],
  ): Promise<DesiredState> {
    const suspended = suspendedIds.length > 0 ? { suspendedShardIds: suspendedIds } : {};
    const desired: ShardLaunchSpec[] = [];
    const unopenable: string[] = [];
    const kept: { id: string; reason: string }[] = [];
    for (const shard of runnable) {
      if (shard.gpuUuids === null || shard.gpuUuids.length === 0) continue;
      const opened = tryLaunchSpecOf(shard, shard.gpuUuids);
      if ('spec' in opened) desired.push(opened.spec);
      else if (shard.state === 'PLACED') unopenable.push(shard.id);
      else if (acceptsKept) kept.push({ id: shard.id, reason: opened.unopenable });
      else throw new SecretsKeyError(`shard ${shard.id} (${shard.state}): ${opened.unopenable}`);
    }
    // Not launched yet and never launchable from here: FAILED (its GPUs freed), not listed.
    await failUnopenableLaunches(this.prisma, this.lifecycle, this.logger, unopenable);
    if (kept.length > 0) {
      this.logger.warn(
        { hostId, kept },
        'shards whose secrets this control plane cannot open are left as they are on their host; start it with the key they were sealed with (docs/operations.md, "Secrets key")',
      );
      return {
        desired,
        stoppedShardIds: stopped,
        ...suspended,
        keptShardIds: kept.map((shard) => shard.id),
      };
    }
    return { desired, stoppedShardIds: stopped, ...suspended };
  }
}

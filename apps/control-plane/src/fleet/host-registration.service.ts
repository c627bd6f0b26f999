import { Inject, Injectable } from '@nestjs/common';
import { HOST_MEMORY_STATES } from '@gpushards/limits';
import { PROTOCOL_VERSION, type RegisterReply, type RegisterRequest } from '@gpushards/protocol';
import { WriteBatcher } from '../agent-link/write-batcher.js';
import { AuditService } from '../audit/audit.service.js';
import { PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import { InjectClock, type Clock } from './clock.js';
import { DesiredShards } from './desired-shards.js';
import { HostLivenessService, type RunningContainers } from './host-liveness.service.js';
import {
  lockRegisteringHosts,
  upsertRegisteredGpus,
  upsertRegisteredHosts,
} from './registration-statements.js';
import { SuspendBudgetCheck } from './suspend-budget-check.js';

/**
 * Registrations written in one transaction at most. A batch holds its hosts' rows and GPU
 * rows until it commits (eight GPUs a host in the fleet simulator: 800 rows).
 */
export const REGISTRATIONS_PER_BATCH = 100;

/**
 * A batch waits for a pooled connection longer than Prisma's 2 s: it is the only registration
 * waiting in this control plane, and failing it would only bring its agents back later.
 */
export const REGISTRATION_TRANSACTION = { maxWait: 10_000, timeout: 30_000 };

/** States a container that runs or is being started is in, as the agent reports them. */
const RUNNING_REPORTS = new Set(['PULLING', 'STARTING', 'RUNNING']);

type Settled<T> = PromiseSettledResult<T>;

/**
 * Agents' registrations, written in batches: one batch at a time per control plane, each a
 * transaction of five statements whatever its size (hosts locked, hosts written, GPUs
 * written, unlisted GPUs marked missing, audit rows; a host with LOST shards, or whose shards
 * in host RAM exceed its suspend budget, settled in it with statements of its own), then the
 * replies' reads. What arrives
 * while a batch is written waits in memory and forms the next (group commit, as heartbeats).
 * So a registration storm (every agent of a 10,000-host fleet at once) holds at most one of
 * the control plane's pooled connections at a time and leaves the rest to heartbeats,
 * reconciles and the offline sweep: one transaction per registration, several round trips
 * each, ran out of connections there and failed by the thousand after Prisma's 2 s wait
 * (bench/README.md, 2026-11-29 fourth session).
 */
@Injectable()
export class HostRegistrationService {
  private readonly logger: Logger;
  private readonly batches: WriteBatcher<RegisterRequest, Settled<RegisterReply>>;
  private readonly suspendBudget: SuspendBudgetCheck;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly cache: FleetCache,
    private readonly lifecycle: ShardLifecycle,
    private readonly liveness: HostLivenessService,
    private readonly desiredShards: DesiredShards,
    @InjectClock() private readonly clock: Clock,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fleet' });
    this.suspendBudget = new SuspendBudgetCheck(lifecycle, this.logger);
    this.batches = new WriteBatcher((requests) => this.registerBatch(requests), {
      maxBatch: REGISTRATIONS_PER_BATCH,
      maxWaitMs: 0,
    });
  }

  /**
   * Creates or updates the host and its GPUs (reservations kept: a host that comes back with
   * running shards keeps them). An OFFLINE host comes back ONLINE (CORDONED if an operator
   * cordoned it); its LOST shards that the agent still runs take their reservation again,
   * the others FAIL. GPUs the agent no longer lists take no new shards. Replies with what
   * the agent should run. Written with the registrations that arrive meanwhile.
   */
  async register(request: RegisterRequest): Promise<RegisterReply> {
    const outcome = await this.batches.record(request);
    if (outcome.status === 'rejected') throw outcome.reason;
    return outcome.value;
  }

  /**
   * One batch. A host twice in it (an agent that gave up waiting and asked again) is written
   * once, from its last request, and both get that reply. A batch that fails is written
   * again host by host, so that one registration that cannot be written fails alone.
   */
  private async registerBatch(
    requests: readonly RegisterRequest[],
  ): Promise<Settled<RegisterReply>[]> {
    const latest = new Map<string, RegisterRequest>();
    for (const request of requests) latest.set(request.host.hostId, request);
    const unique = [...latest.values()];
    const written = new Map<string, Settled<void>>();
    try {
      await this.write(unique);
      for (const { host } of unique)
        written.set(host.hostId, { status: 'fulfilled', value: undefined });
    } catch (error) {
      if (unique.length === 1) {
        written.set(unique[0]!.host.hostId, { status: 'rejected', reason: error });
      } else {
        this.logger.warn(
          { err: error, registrations: unique.length },
          'a batch of registrations failed; writing them one by one',
        );
        for (const request of unique) {
          written.set(request.host.hostId, await settle(this.write([request])));
        }
      }
    }
    const registered = unique.filter(
      (request) => written.get(request.host.hostId)!.status === 'fulfilled',
    );
    const replies = new Map<string, Settled<RegisterReply>>();
    for (const [hostId, outcome] of written) {
      if (outcome.status === 'rejected') replies.set(hostId, outcome);
    }
    try {
      const desired = await this.desiredShards.desiredShardsForMany(
        registered.map((request) => ({
          hostId: request.host.hostId,
          acceptsKept: request.acceptsKeptShards === true,
        })),
      );
      registered.forEach((request, i) => {
        const hostId = request.host.hostId;
        const state = desired[i]!;
        replies.set(
          hostId,
          state.status === 'rejected'
            ? state
            : {
                status: 'fulfilled',
                value: {
                  protocolVersion: PROTOCOL_VERSION,
                  hostId,
                  accepted: true,
                  ...state.value,
                },
              },
        );
      });
    } catch (error) {
      for (const request of registered)
        replies.set(request.host.hostId, { status: 'rejected', reason: error });
    }
    return requests.map((request) => replies.get(request.host.hostId)!);
  }

  /** The hosts, their GPUs, their lost shards settled and their audit rows, in one transaction. */
  private async write(requests: readonly RegisterRequest[]): Promise<void> {
    const now = this.clock.now();
    const effects = new CommitEffects();
    await this.prisma.direct.transaction(async (tx) => {
      const previous = await lockRegisteringHosts(
        tx,
        requests.map((request) => request.host.hostId),
      );
      const hosts = await upsertRegisteredHosts(
        tx,
        requests.map((request) => request.host),
        now,
        HOST_MEMORY_STATES,
      );
      for (const kept of await upsertRegisteredGpus(tx, requests, now)) {
        this.logger.warn(
          kept,
          'GPU reports less memory than is reserved on it; keeping the old total until reservations shrink',
        );
      }
      for (const request of requests) {
        const { hasLost, overBudget } = hosts.get(request.host.hostId)!;
        const hostId = request.host.hostId;
        if (hasLost) {
          await this.liveness.recoverLostShards(tx, hostId, runningOf(request), effects, now);
        }
        // Returned shards may put a host over its budget; the check reads it again itself.
        if (hasLost || overBudget) await this.suspendBudget.settle(tx, hostId, effects);
      }
      await this.audit.recordOwn(
        tx,
        requests.map(({ host, gpus }) => ({
          action: 'host.register',
          targetType: 'Host',
          targetId: host.hostId,
          teamId: null,
          details: {
            previousState: previous.get(host.hostId) ?? null,
            state: hosts.get(host.hostId)!.state,
            gpus: gpus.length,
            agentVersion: host.agentVersion,
            simulated: host.simulated,
            ...(host.isolatedComputePermille
              ? { isolatedComputePermille: host.isolatedComputePermille }
              : {}),
          },
        })),
      );
      for (const { host } of requests) {
        effects.hostStates.push({ hostId: host.hostId, state: hosts.get(host.hostId)!.state });
      }
    }, REGISTRATION_TRANSACTION);
    this.lifecycle.afterCommit(effects);
    this.cache.requestRefresh();
    for (const { host, gpus } of requests) {
      this.logger.info({ hostId: host.hostId, gpus: gpus.length }, 'host registered');
    }
  }
}

async function settle(work: Promise<void>): Promise<Settled<void>> {
  try {
    return { status: 'fulfilled', value: await work };
  } catch (reason) {
    return { status: 'rejected', reason };
  }
}

/** The shard containers the agent reports running or starting, with where their memory is. */
function runningOf(request: RegisterRequest): RunningContainers {
  return new Map(
    request.runningShards
      .filter((shard) => RUNNING_REPORTS.has(shard.state))
      .map((shard) => [shard.shardId, shard.memory]),
  );
}

import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import type { ObservedMemory } from '@gpushards/limits';
import { PROTOCOL_VERSION, type RegisterRequest } from '@gpushards/protocol';

import { isolatedComputePermille } from '../compute/mps-partition.js';
import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { DockerRuntime } from '../containers/docker-runtime.js';
import { ComputeFenceService } from '../compute/compute-fence.service.js';
import { EnforcementService } from '../enforcement/enforcement.service.js';
import { GpusService } from '../gpus/gpus.service.js';
import { AGENT_LINK, LinkUnavailableError, type AgentLink } from '../link/agent-link.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { MemoryService } from '../memory/memory.service.js';
import { ReconcileRequests } from '../shards/reconcile-requests.js';
import { ShardsService } from '../shards/shards.service.js';
import { HeartbeatService } from './heartbeat.service.js';
import { registerRetryDelayMs } from './register-retry.js';
import { ReconcileService } from './reconcile.service.js';

/** The control plane refused this agent; starting again will not help until someone acts. */
export class RegistrationRejectedError extends Error {
  override name = 'RegistrationRejectedError';

  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`the control plane refused to register this host (${code}): ${message}`);
  }
}

/** Reported in register; the version of apps/agent/package.json. */
export const AGENT_VERSION = '0.1.0';

/**
 * The agent's life: adopt the shard containers already here, follow Docker's events,
 * take commands (through CommandsController), register (again after every reconnection), then heartbeat and reconcile
 * on their intervals until stopped.
 */
@Injectable()
export class AgentService implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger: Logger;
  private readonly stopping = new AbortController();
  private readonly timers = new Set<NodeJS.Timeout>();
  private registering: Promise<void> | undefined;
  private reconciling: Promise<void> = Promise.resolve();

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    @Inject(AGENT_LINK) private readonly link: AgentLink,
    private readonly gpus: GpusService,
    private readonly docker: DockerRuntime,
    private readonly shards: ShardsService,
    private readonly heartbeats: HeartbeatService,
    private readonly reconciler: ReconcileService,
    private readonly enforcement: EnforcementService,
    private readonly computeFence: ComputeFenceService,
    private readonly reconcileRequests: ReconcileRequests,
    private readonly memory: MemoryService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'agent' });
  }

  /**
   * Before the microservice's link connects and takes commands: adopt the shard containers
   * already here and follow Docker's events.
   */
  async onApplicationBootstrap(): Promise<void> {
    await this.shards.sweep();
    this.docker.watchEvents(
      this.config.hostId,
      (event) => {
        void this.shards
          .onContainerEvent(event)
          .catch((error: unknown) =>
            this.logger.warn({ err: error, event }, 'could not apply a Docker event'),
          );
      },
      this.stopping.signal,
    );
  }

  /**
   * Once the link is connected and commands reach their handlers (AgentLinkServer): register
   * (again after every reconnection), then heartbeat and reconcile on their intervals.
   * Resolves once registered; throws RegistrationRejectedError, or on a broken setup.
   */
  async start(): Promise<void> {
    this.link.onRestored(() => {
      void this.register().catch((error: unknown) =>
        this.logger.error({ err: error }, 'registering again failed'),
      );
    });
    await this.register();
    this.every(this.config.heartbeatSeconds, 'heartbeat', () => this.heartbeats.beat(), true);
    // At once, not a period later: what changed while the agent was away (containers that
    // exited, stops that were lost, containers adopted) settles now.
    this.every(this.config.reconcileSeconds, 'reconcile', () => this.reconcile(), true);
    // And whenever a control plane asks (one that starts does: events sent while none
    // listened went to no one).
    this.reconcileRequests.onRequest(() => {
      this.logger.info('a control plane asked for a reconcile');
      void this.reconcile().catch((error: unknown) =>
        this.logger.warn({ err: error }, 'reconcile failed'),
      );
    });
    this.enforcement.start();
    this.computeFence.start();
    this.logger.info(
      {
        heartbeatSeconds: this.config.heartbeatSeconds,
        reconcileSeconds: this.config.reconcileSeconds,
      },
      'agent started',
    );
  }

  /** Stops timers, the Docker event stream and the link; shard containers keep running. */
  async stop(): Promise<void> {
    this.onModuleDestroy();
    await this.link.close();
    this.logger.info('agent stopped');
  }

  /** Also when the application closes after a failed start. */
  onModuleDestroy(): void {
    this.stopping.abort();
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
  }

  /**
   * One reconciliation. The control plane answers no reconcile from a host it does not know
   * (an empty desired set would make this agent remove every shard), so an unanswered one
   * means it lost us, e.g. it restarted on a new database: register again, which retries
   * until a control plane answers.
   */
  reconcile(): Promise<void> {
    // One at a time: the periodic one and those a control plane asks for.
    const next = this.reconciling.then(() => this.reconcileUnqueued());
    this.reconciling = next.catch(() => undefined);
    return next;
  }

  private async reconcileUnqueued(): Promise<void> {
    try {
      await this.reconciler.reconcileOnce();
    } catch (error) {
      if (!(error instanceof LinkUnavailableError)) throw error;
      this.logger.warn({ err: error }, 'reconcile went unanswered; registering again');
      await this.register();
    }
  }

  /** Registers, retrying with jittered backoff while nobody answers; one attempt at a time. */
  register(): Promise<void> {
    this.registering ??= this.registerUntilAnswered().finally(() => {
      this.registering = undefined;
    });
    return this.registering;
  }

  private async registerUntilAnswered(): Promise<void> {
    for (let attempt = 0; !this.stopping.signal.aborted; attempt++) {
      await this.shards.sweep();
      const mark = this.shards.commandMark();
      try {
        // Where each running container's memory is, as a reconcile reads it: the control plane
        // settles a shard lost while suspended by it.
        const memory = await this.memory.observeAll();
        const reply = await this.link.register(this.registerRequest(memory));
        if (!reply.accepted)
          throw new RegistrationRejectedError(reply.error.code, reply.error.message);
        this.logger.info(
          {
            desired: reply.desired.length,
            stopped: reply.stoppedShardIds.length,
            kept: reply.keptShardIds?.length ?? 0,
            suspended: reply.suspendedShardIds?.length ?? 0,
          },
          'registered with the control plane',
        );
        await this.reconciler.apply(reply, mark, memory);
        return;
      } catch (error) {
        if (!(error instanceof LinkUnavailableError)) throw error;
        const delay = registerRetryDelayMs(attempt);
        this.logger.warn(
          { err: error, retryInMs: delay },
          'the control plane did not answer; registering again later',
        );
        await this.sleep(delay);
      }
    }
  }

  private registerRequest(memory?: ReadonlyMap<string, ObservedMemory>): RegisterRequest {
    const inventory = this.gpus.inventory;
    const samples = new Map(this.gpus.sample().map((sample) => [sample.uuid, sample.usedBytes]));
    return {
      protocolVersion: PROTOCOL_VERSION,
      hostId: this.config.hostId,
      host: {
        hostId: this.config.hostId,
        name: this.config.hostName,
        labels: { ...this.config.labels },
        agentVersion: AGENT_VERSION,
        driverVersion: inventory.driverVersion,
        cudaVersion: inventory.cudaVersion,
        simulated: inventory.simulated,
        contextOverheadBytes: inventory.contextOverheadBytes,
        // The host's MPS partition for isolated shards; absent: it takes none.
        ...(this.config.mps !== undefined
          ? { isolatedComputePermille: isolatedComputePermille(this.config.mps) }
          : {}),
        // Elastic memory: the host RAM it lets suspended shards take, or 0 and why not.
        ...this.memory.hostInfo(),
      },
      gpus: inventory.gpus.map((gpu) => ({ ...gpu, usedBytes: samples.get(gpu.uuid) ?? 0 })),
      runningShards: this.shards.list().flatMap((shard) =>
        shard.containerId === undefined
          ? []
          : [
              {
                shardId: shard.shardId,
                containerId: shard.containerId,
                state: shard.state,
                ...(memory?.has(shard.shardId) ? { memory: memory.get(shard.shardId)! } : {}),
              },
            ],
      ),
      acceptsKeptShards: true,
    };
  }

  /** Runs `task` every `seconds`, never two at once; a failure is logged and the next runs. */
  private every(seconds: number, what: string, task: () => Promise<void>, now: boolean): void {
    const schedule = (delayMs: number): void => {
      if (this.stopping.signal.aborted) return;
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        task()
          .catch((error: unknown) => this.logger.warn({ err: error }, `${what} failed`))
          .finally(() => schedule(seconds * 1000));
      }, delayMs);
      this.timers.add(timer);
    };
    schedule(now ? 0 : seconds * 1000);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        resolve();
      }, ms);
      this.timers.add(timer);
      this.stopping.signal.addEventListener('abort', () => resolve(), { once: true });
    });
  }
}

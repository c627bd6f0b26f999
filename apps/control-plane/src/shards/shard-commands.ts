import { Global, Inject, Module, type DynamicModule } from '@nestjs/common';
import type {
  ComputeShareSpec,
  GpuLimit,
  ShardLaunchSpec,
  SuspendCommand,
} from '@gpushards/protocol';

/** Who asked for a suspend, as the agent's command carries it. */
export type SuspendCause = SuspendCommand['cause'];
import { CapPolicies } from '../fence/cap-policies.js';
import { LOGGER, type Logger } from '../logging/logger.js';

/**
 * The port through which the control plane tells a host's agent what to do with a shard,
 * after the change is committed. Implementations deliver the command (over NATS: a `launch`,
 * `stop`, `delete` or `resize` command with a fresh command id on gpushards.host.<id>.cmd) and
 * resolve when the agent took it on; they reject when it could not be delivered or the agent
 * refused. Callers log a rejection and go on: the database already says what should happen,
 * and the agent's next reconcile converges on it.
 */
export interface ShardCommands {
  launch(hostId: string, spec: ShardLaunchSpec): Promise<void>;
  stop(hostId: string, shardId: string, graceSeconds: number): Promise<void>;
  delete(hostId: string, shardId: string): Promise<void>;
  /**
   * The shard's new caps, one per GPU (limitBytes = requested + context overhead), and its
   * compute share when that changed.
   */
  resize(
    hostId: string,
    shardId: string,
    gpus: readonly GpuLimit[],
    compute?: ComputeShareSpec,
  ): Promise<void>;
  /**
   * Elastic memory (docs/elastic.md): move the shard's GPU memory to host RAM (`cause`: who
   * asked), or back. The end arrives as a state event (SUSPENDED, RESUMED or a failure).
   * `shardVersion` is the shard's version once the move was decided: the agent refuses a move
   * older than one it already took on (a retried suspend arriving after a wake's resume).
   */
  suspend(
    hostId: string,
    shardId: string,
    cause: SuspendCause,
    shardVersion: number,
  ): Promise<void>;
  resume(hostId: string, shardId: string, shardVersion: number): Promise<void>;
  /**
   * Reconcile now rather than at the next period (a control plane that starts asks every host
   * that is not OFFLINE: state events sent while none listened went to no one).
   */
  reconcile(hostId: string): Promise<void>;
}

export const SHARD_COMMANDS = Symbol('ShardCommands');

/**
 * What a control plane without an agent link uses: every command is refused (nothing is
 * recorded for an agent that will never read it). createControlPlane starts such a control
 * plane with `security.noAgents`, so createShard answers NO_AGENTS before it gets here; stop and
 * delete still settle the database, and log that nothing was delivered.
 */
export class UndeliverableShardCommands implements ShardCommands {
  launch(hostId: string): Promise<void> {
    return this.refuse(hostId);
  }

  stop(hostId: string): Promise<void> {
    return this.refuse(hostId);
  }

  delete(hostId: string): Promise<void> {
    return this.refuse(hostId);
  }

  resize(hostId: string): Promise<void> {
    return this.refuse(hostId);
  }

  suspend(hostId: string): Promise<void> {
    return this.refuse(hostId);
  }

  resume(hostId: string): Promise<void> {
    return this.refuse(hostId);
  }

  reconcile(hostId: string): Promise<void> {
    return this.refuse(hostId);
  }

  private refuse(hostId: string): Promise<void> {
    return Promise.reject(
      new Error(`no agent link: nothing can reach host ${hostId} (GPUSHARDS_NO_AGENTS)`),
    );
  }
}

/**
 * Provides SHARD_COMMANDS everywhere: the given implementation, or UndeliverableShardCommands
 * (with a warning in the log, since nothing reaches an agent).
 */
@Global()
@Module({})
export class ShardCommandsModule {
  static forRoot(commands?: ShardCommands): DynamicModule {
    return {
      module: ShardCommandsModule,
      providers: [
        {
          provide: SHARD_COMMANDS,
          inject: [LOGGER, CapPolicies],
          useFactory: (logger: Logger, policies: CapPolicies): ShardCommands => {
            if (commands !== undefined) return withCapPolicies(commands, policies);
            logger.warn(
              { module: 'shards' },
              'no agent link: shards cannot be launched (createShard answers NO_AGENTS)',
            );
            return new UndeliverableShardCommands();
          },
        },
      ],
      exports: [SHARD_COMMANDS],
    };
  }
}

/** Launch specs leave with their team's cap policy (the agent enforces it). */
function withCapPolicies(commands: ShardCommands, policies: CapPolicies): ShardCommands {
  return {
    launch: (hostId, spec) => commands.launch(hostId, policies.withPolicy(spec)),
    stop: (hostId, shardId, graceSeconds) => commands.stop(hostId, shardId, graceSeconds),
    delete: (hostId, shardId) => commands.delete(hostId, shardId),
    resize: (hostId, shardId, gpus, compute) => commands.resize(hostId, shardId, gpus, compute),
    suspend: (hostId, shardId, cause, shardVersion) =>
      commands.suspend(hostId, shardId, cause, shardVersion),
    resume: (hostId, shardId, shardVersion) => commands.resume(hostId, shardId, shardVersion),
    reconcile: (hostId) => commands.reconcile(hostId),
  };
}

/** For constructor parameters: `@InjectShardCommands() commands: ShardCommands`. */
export const InjectShardCommands = () => Inject(SHARD_COMMANDS);

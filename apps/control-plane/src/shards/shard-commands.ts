import { Global, Inject, Module, type DynamicModule } from '@nestjs/common';
import type { GpuLimit, ShardLaunchSpec } from '@gpushards/protocol';
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
  /** The shard's new caps, one per GPU (limitBytes = requested + context overhead). */
  resize(hostId: string, shardId: string, gpus: readonly GpuLimit[]): Promise<void>;
}

export const SHARD_COMMANDS = Symbol('ShardCommands');

export type RecordedShardCommand =
  | { readonly type: 'launch'; readonly hostId: string; readonly spec: ShardLaunchSpec }
  | {
      readonly type: 'stop';
      readonly hostId: string;
      readonly shardId: string;
      readonly graceSeconds: number;
    }
  | { readonly type: 'delete'; readonly hostId: string; readonly shardId: string }
  | {
      readonly type: 'resize';
      readonly hostId: string;
      readonly shardId: string;
      readonly gpus: readonly GpuLimit[];
    };

/** The newest commands an InMemoryShardCommands keeps; older ones are dropped. */
export const MAX_RECORDED_COMMANDS = 10_000;

/**
 * Delivers nothing: records the commands in memory (the newest MAX_RECORDED_COMMANDS). The
 * default until the NATS agent link provides SHARD_COMMANDS; shards then wait in PLACED until
 * an agent reconciles. Tests read `recorded`.
 */
export class InMemoryShardCommands implements ShardCommands {
  readonly recorded: RecordedShardCommand[] = [];

  launch(hostId: string, spec: ShardLaunchSpec): Promise<void> {
    return this.record({ type: 'launch', hostId, spec });
  }

  stop(hostId: string, shardId: string, graceSeconds: number): Promise<void> {
    return this.record({ type: 'stop', hostId, shardId, graceSeconds });
  }

  delete(hostId: string, shardId: string): Promise<void> {
    return this.record({ type: 'delete', hostId, shardId });
  }

  resize(hostId: string, shardId: string, gpus: readonly GpuLimit[]): Promise<void> {
    return this.record({ type: 'resize', hostId, shardId, gpus });
  }

  /** The commands recorded for one shard, oldest first. */
  forShard(shardId: string): RecordedShardCommand[] {
    return this.recorded.filter((command) =>
      command.type === 'launch' ? command.spec.shardId === shardId : command.shardId === shardId,
    );
  }

  protected record(command: RecordedShardCommand): Promise<void> {
    this.recorded.push(command);
    if (this.recorded.length > MAX_RECORDED_COMMANDS) this.recorded.shift();
    return Promise.resolve();
  }
}

/**
 * Provides SHARD_COMMANDS everywhere: the given implementation, or InMemoryShardCommands
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
              'no agent link: shard commands are recorded in memory and not delivered',
            );
            return new InMemoryShardCommands();
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
    resize: (hostId, shardId, gpus) => commands.resize(hostId, shardId, gpus),
  };
}

/** For constructor parameters: `@InjectShardCommands() commands: ShardCommands`. */
export const InjectShardCommands = () => Inject(SHARD_COMMANDS);

import type { ComputeShareSpec, GpuLimit, ShardLaunchSpec } from '@gpushards/protocol';
import type { ShardCommands, SuspendCause } from '../shards/shard-commands.js';

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
      readonly compute?: ComputeShareSpec;
    }
  | {
      readonly type: 'suspend';
      readonly hostId: string;
      readonly shardId: string;
      readonly cause: SuspendCause;
      readonly shardVersion: number;
    }
  | {
      readonly type: 'resume';
      readonly hostId: string;
      readonly shardId: string;
      readonly shardVersion: number;
    }
  | { readonly type: 'reconcile'; readonly hostId: string };

/** The newest commands a FakeShardCommands keeps; older ones are dropped. */
export const MAX_RECORDED_COMMANDS = 10_000;

/**
 * Test double of the agent link: records the commands in memory (the newest
 * MAX_RECORDED_COMMANDS) and, while `failure` is set, rejects each one with it (an unreachable or refusing agent).
 * Tests read `recorded`.
 */
export class FakeShardCommands implements ShardCommands {
  failure: Error | undefined;
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

  resize(
    hostId: string,
    shardId: string,
    gpus: readonly GpuLimit[],
    compute?: ComputeShareSpec,
  ): Promise<void> {
    return this.record({
      type: 'resize',
      hostId,
      shardId,
      gpus,
      ...(compute === undefined ? {} : { compute }),
    });
  }

  suspend(
    hostId: string,
    shardId: string,
    cause: SuspendCause,
    shardVersion: number,
  ): Promise<void> {
    return this.record({ type: 'suspend', hostId, shardId, cause, shardVersion });
  }

  resume(hostId: string, shardId: string, shardVersion: number): Promise<void> {
    return this.record({ type: 'resume', hostId, shardId, shardVersion });
  }

  reconcile(hostId: string): Promise<void> {
    return this.record({ type: 'reconcile', hostId });
  }

  /** The commands recorded for one shard, oldest first. */
  forShard(shardId: string): RecordedShardCommand[] {
    return this.recorded.filter((command) =>
      command.type === 'reconcile'
        ? false
        : command.type === 'launch'
          ? command.spec.shardId === shardId
          : command.shardId === shardId,
    );
  }

  protected record(command: RecordedShardCommand): Promise<void> {
    this.recorded.push(command);
    if (this.recorded.length > MAX_RECORDED_COMMANDS) this.recorded.shift();
    return this.failure === undefined ? Promise.resolve() : Promise.reject(this.failure);
  }
}

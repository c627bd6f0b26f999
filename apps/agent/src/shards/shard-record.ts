/**
 * The agent's vocabulary of a shard: the record it keeps of each shard of this host, the errors
 * a command on an unknown shard or GPU ends in, and what a launch resolves to. Separate from
 * ShardsService, which does the operations, because the command handler (its errors) and the
 * enforcement and compute fences' tests (ShardRecord) name them without needing the service.
 */
import type { ContainerKind } from '@gpushards/limits';
import type { ShardState } from '@gpushards/protocol';

/** What the agent knows of one shard of this host. */
export interface ShardRecord {
  readonly shardId: string;
  teamId: string;
  /** The shard's container, when one exists. */
  containerId?: string;
  /** The last state reported (or found when adopting a container). */
  state: ShardState;
  /** What Docker last said of the container (the sweep, events, the agent's own acts). */
  observed?: ContainerKind;
  /** With observed `exited`. */
  exitCode?: number;
  gpuUuids: readonly string[];
  /** Set while the image is pulled; aborted by a stop or delete that comes meanwhile. */
  pull?: AbortController;
}

export class UnknownShardError extends Error {
  override name = 'UnknownShardError';
}

export class UnknownGpuError extends Error {
  override name = 'UnknownGpuError';
}

/** A suspend or resume this host cannot do (docs/elastic.md): NOT_SUSPENDABLE. */
export class NotSuspendableError extends Error {
  override name = 'NotSuspendableError';
}

/**
 * A suspend or resume older than one the agent already took on for the shard (by the shard
 * version the control plane decided each at): STALE_COMMAND. A retry of a command sent while
 * this agent was away arrives after a newer move and would undo it.
 */
export class StaleCommandError extends Error {
  override name = 'StaleCommandError';
}

/** The state events of a move of a running shard's GPU memory (docs/elastic.md). */
export type MemoryReport = Extract<
  ShardState,
  'SUSPENDING' | 'SUSPENDED' | 'SUSPEND_FAILED' | 'RESUMING' | 'RESUMED' | 'RESUME_FAILED'
>;

export interface LaunchResult {
  readonly state: ShardState;
  readonly containerId?: string;
}

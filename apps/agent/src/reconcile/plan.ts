import type { ShardLaunchSpec, ShardState } from '@gpushards/protocol';

/** What the agent knows of a shard when a reconcile reply arrives. */
export interface KnownShard {
  readonly shardId: string;
  readonly state: ShardState;
}

export interface DesiredState {
  readonly desired: readonly ShardLaunchSpec[];
  readonly stoppedShardIds: readonly string[];
}

export interface ReconcilePlan {
  /** Desired shards this agent has never heard of (a lost launch, a lost container). */
  readonly launch: readonly ShardLaunchSpec[];
  /** Desired shards that run: their caps are written again, in case a resize was lost. */
  readonly applyLimits: readonly ShardLaunchSpec[];
  /** Shards that must stay stopped but run (or are being launched). */
  readonly stop: readonly string[];
  /** Shards the control plane does not list: container and region folder removed. */
  readonly remove: readonly string[];
}

const ACTIVE: ReadonlySet<ShardState> = new Set(['PULLING', 'STARTING', 'RUNNING']);

/**
 * Turns a reconcile (or register) reply into actions, following libs/protocol's README:
 * `desired` must run, `stoppedShardIds` must stay stopped, anything else goes. Shards in
 * `skip` got a command after the request was sent, so the reply may be older than that
 * command: they are left for the next round.
 *
 * A desired shard that the agent knows but that does not run (it exited, failed or its
 * container vanished) is not started again here: the agent reported that state, and the
 * control plane decides with a launch command. Reconciliation only launches shards the
 * agent has no trace of, so a crashing shard is not restarted in a loop.
 */
export function planReconcile(
  known: readonly KnownShard[],
  reply: DesiredState,
  skip: ReadonlySet<string>,
): ReconcilePlan {
  const byId = new Map(known.map((shard) => [shard.shardId, shard]));
  const desiredIds = new Set(reply.desired.map((spec) => spec.shardId));
  const stoppedIds = new Set(reply.stoppedShardIds);
  const launch: ShardLaunchSpec[] = [];
  const applyLimits: ShardLaunchSpec[] = [];
  for (const spec of reply.desired) {
    if (skip.has(spec.shardId)) continue;
    const shard = byId.get(spec.shardId);
    if (shard === undefined) launch.push(spec);
    else if (shard.state === 'RUNNING') applyLimits.push(spec);
  }
  const stop: string[] = [];
  const remove: string[] = [];
  for (const shard of known) {
    if (skip.has(shard.shardId) || desiredIds.has(shard.shardId)) continue;
    if (stoppedIds.has(shard.shardId)) {
      if (ACTIVE.has(shard.state)) stop.push(shard.shardId);
    } else {
      remove.push(shard.shardId);
    }
  }
  return { launch, applyLimits, stop, remove };
}

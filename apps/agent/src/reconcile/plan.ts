import {
  containerActionFor,
  memoryActionFor,
  type ContainerKind,
  type DesiredContainer,
  type ObservedMemory,
} from '@gpushards/limits';
import type { ShardLaunchSpec, ShardState } from '@gpushards/protocol';

/** What the agent knows of a shard when a reconcile reply arrives. */
export interface KnownShard {
  readonly shardId: string;
  readonly state: ShardState;
  /** What Docker last said of its container (absent when it has none). */
  readonly observed?: ContainerKind;
  /** Where its running container's GPU memory is (absent: resident, or a host that does not suspend). */
  readonly memory?: ObservedMemory;
}

export interface DesiredState {
  readonly desired: readonly ShardLaunchSpec[];
  readonly stoppedShardIds: readonly string[];
  /** Left as they are: the control plane cannot give their spec (their secrets do not open there). */
  readonly keptShardIds?: readonly string[];
  /** Must run with their GPU memory in host RAM: suspended if they are not, never launched. */
  readonly suspendedShardIds?: readonly string[];
}

export interface ReconcilePlan {
  /**
   * Desired shards to launch: those this agent has no trace of (a lost launch, a lost
   * container) and those whose container was created but never started (the agent died
   * between create and start): that container is replaced.
   */
  readonly launch: readonly ShardLaunchSpec[];
  /** Desired shards that run: their caps are written again, in case a resize was lost. */
  readonly applyLimits: readonly ShardLaunchSpec[];
  /** Shards whose container is paused and should run. */
  readonly unpause: readonly string[];
  /** Shards that must stay stopped but run (or are being launched). */
  readonly stop: readonly string[];
  /** Dead containers: removed (the shard is kept; the control plane settles it). */
  readonly discard: readonly string[];
  /** Shards the control plane does not list: container and region folder removed. */
  readonly remove: readonly string[];
  /** Running shards whose GPU memory must go to host RAM (suspendedShardIds), or come back (desired). */
  readonly suspend: readonly string[];
  readonly resume: readonly string[];
}

/** Launching or pulling: the outcome follows as events. */
const BUSY: ReadonlySet<ShardState> = new Set(['PULLING', 'STARTING']);

/** Reported ends: a known shard without a container is not launched again (no restart loop). */
const ENDED: ReadonlySet<ShardState> = new Set(['EXITED', 'FAILED', 'STOPPED', 'VANISHED']);

/** What a known shard's container is, by what Docker said or else by its last report. */
export function observedKind(shard: KnownShard): ContainerKind {
  if (shard.observed !== undefined) return shard.observed;
  return shard.state === 'RUNNING' ? 'running' : 'absent';
}

/**
 * Turns a reconcile (or register) reply into actions by the convergence table's container
 * half (libs/limits containerActionFor, memoryActionFor): `desired` must run with their GPU
 * memory on the GPU, `suspendedShardIds` must run with it in host RAM (and are never
 * launched), `stoppedShardIds` must stay stopped, `keptShardIds` are left alone, anything else
 * goes. Shards in `skip` got a command
 * or changed after the request was sent, so the reply may be older than that: they are left
 * for the next round.
 *
 * A desired shard that the agent knows ended (it exited, failed, was stopped or vanished) is
 * not started again here: the agent reported that, and the control plane decides. So a
 * crashing shard is not restarted in a loop; an exited container is the control plane's to
 * settle (EXITED).
 */
export function planReconcile(
  known: readonly KnownShard[],
  reply: DesiredState,
  skip: ReadonlySet<string>,
): ReconcilePlan {
  const byId = new Map(known.map((shard) => [shard.shardId, shard]));
  const desiredIds = new Set(reply.desired.map((spec) => spec.shardId));
  const stoppedIds = new Set(reply.stoppedShardIds);
  const keptIds = new Set(reply.keptShardIds);
  const suspendedIds = new Set(reply.suspendedShardIds);
  const plan = {
    launch: [] as ShardLaunchSpec[],
    applyLimits: [] as ShardLaunchSpec[],
    unpause: [] as string[],
    stop: [] as string[],
    discard: [] as string[],
    remove: [] as string[],
    suspend: [] as string[],
    resume: [] as string[],
  };
  for (const spec of reply.desired) {
    if (skip.has(spec.shardId)) continue;
    const shard = byId.get(spec.shardId);
    if (shard !== undefined && BUSY.has(shard.state)) continue;
    const kind = shard === undefined ? 'absent' : observedKind(shard);
    switch (act('run', kind)) {
      case 'launch':
        if (shard === undefined || !ENDED.has(shard.state)) plan.launch.push(spec);
        break;
      case 'relaunch':
        plan.launch.push(spec);
        break;
      case 'unpause':
        plan.unpause.push(spec.shardId);
        break;
      case 'remove':
        plan.discard.push(spec.shardId);
        break;
      case 'stop':
      case 'none':
        if (kind === 'running' && shard?.state === 'RUNNING') {
          plan.applyLimits.push(spec);
          if (memoryActionFor('resident', shard.memory ?? 'resident') === 'resume') {
            plan.resume.push(spec.shardId);
          }
        }
        break;
    }
  }
  for (const shardId of suspendedIds) {
    const shard = byId.get(shardId);
    // Never launched: its memory lived in the processes of the container that is gone.
    if (skip.has(shardId) || desiredIds.has(shardId) || shard === undefined) continue;
    if (BUSY.has(shard.state)) continue;
    const kind = observedKind(shard);
    switch (act('suspended', kind)) {
      case 'unpause':
        plan.unpause.push(shardId);
        break;
      case 'remove':
        plan.discard.push(shardId);
        break;
      case 'launch':
      case 'relaunch':
      case 'stop':
      case 'none':
        if (kind === 'running' && shard.state === 'RUNNING') {
          if (memoryActionFor('suspended', shard.memory ?? 'resident') === 'suspend') {
            plan.suspend.push(shardId);
          }
        }
        break;
    }
  }
  for (const shard of known) {
    if (
      skip.has(shard.shardId) ||
      desiredIds.has(shard.shardId) ||
      keptIds.has(shard.shardId) ||
      suspendedIds.has(shard.shardId)
    ) {
      continue;
    }
    if (!stoppedIds.has(shard.shardId)) {
      plan.remove.push(shard.shardId);
      continue;
    }
    const action = act('stopped', observedKind(shard));
    if (action === 'stop' || BUSY.has(shard.state)) plan.stop.push(shard.shardId);
    else if (action === 'remove') plan.discard.push(shard.shardId);
  }
  return plan;
}

function act(desired: DesiredContainer, kind: ContainerKind) {
  return containerActionFor(desired, kind);
}

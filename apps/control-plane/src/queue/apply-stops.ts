/**
 * Applies the stops of an admission pass: shards that waited past their maximum wait expire,
 * and the victims of reclaims are told to stop. Each shard is locked and checked again, so a
 * shard that moved since the pass read it is left as it is.
 */
import type { AdmissionPlan, PendingShard, Preemption } from '@gpushards/limits';
import type { RawSql } from '../database/index.js';
import type { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';

/** Expires the plan's shards still PENDING; returns those expired and those skipped. */
export async function applyExpiries(
  tx: RawSql,
  lifecycle: ShardLifecycle,
  expired: AdmissionPlan['expired'],
  effects: CommitEffects,
  now: Date,
): Promise<{ settled: string[]; skipped: string[] }> {
  const settled: string[] = [];
  const skipped: string[] = [];
  for (const shardId of expired) {
    const shard = await lifecycle.lock(tx, shardId);
    if (shard?.state !== 'PENDING') {
      skipped.push(shardId);
      continue;
    }
    await lifecycle.moveTo(
      tx,
      shard,
      'EXPIRED',
      'expired',
      { failureReason: 'waited in the queue past its maximum wait' },
      effects,
      now,
    );
    settled.push(shardId);
  }
  return { settled, skipped };
}

export interface ReclaimContext {
  readonly pending: readonly PendingShard[];
  readonly teamNames: ReadonlyMap<string, string>;
  /** Reclaims already in flight: the shard they are for, its victims' stop times (ms). */
  readonly victimStops: ReadonlyMap<string, readonly number[]>;
  readonly graceSeconds: number;
}

/**
 * Moves each victim still holding capacity to STOPPING and sends its stop after commit.
 * Returns the preemptions applied and the reclaims in flight with these stops added.
 */
export async function applyReclaims(
  tx: RawSql,
  lifecycle: ShardLifecycle,
  preemptions: readonly Preemption[],
  context: ReclaimContext,
  effects: CommitEffects,
  now: Date,
): Promise<{ preempted: Preemption[]; victimStops: Map<string, readonly number[]> }> {
  const victimStops = new Map(context.victimStops);
  const preempted: Preemption[] = [];
  for (const preemption of preemptions) {
    const victim = await lifecycle.lock(tx, preemption.victimId);
    if (
      victim === undefined ||
      !(victim.state === 'PLACED' || victim.state === 'STARTING' || victim.state === 'RUNNING')
    ) {
      continue;
    }
    preempted.push(preemption);
    const forTeam = context.pending.find((p) => p.id === preemption.forShardId)?.teamId ?? '';
    const reason =
      `reclaimed: its team borrowed beyond its guarantee, and shard ${preemption.forShardId} ` +
      `of team ${context.teamNames.get(forTeam) ?? '?'} waits within its own`;
    const stopping = await lifecycle.moveTo(
      tx,
      victim,
      'STOPPING',
      'reclaim',
      { failureReason: reason },
      effects,
      now,
    );
    const stops = victimStops.get(preemption.forShardId) ?? [];
    victimStops.set(preemption.forShardId, [...stops, stopping.updatedAt.getTime()]);
    await tx.$executeRaw`
      UPDATE shard SET stop_intent = ${victim.requeue ? 'requeue' : 'preempt'},
                       reclaim_for = ${preemption.forShardId}::uuid
       WHERE id = ${victim.id}::uuid`;
    const hostId = preemption.hostId;
    effects.command(
      { shardId: victim.id, hostId, command: 'stop', reason: 'reclaim' },
      (commands) => commands.stop(hostId, victim.id, context.graceSeconds),
    );
  }
  return { preempted, victimStops };
}

import {
  GPUS_GIVEN_AWAY,
  HOST_MEMORY_STATES,
  lostShardReturn,
  SUSPEND_CAUSES,
  type LostShardReturn,
  type ObservedMemory,
  type ReturnRoom,
  type SuspendCause,
  type TransitionCause,
  bytes,
} from '@gpushards/limits';
import type { RawSql, ShardState } from '../database/index.js';
import type { SuspendCause as SuspendCommandCause } from '../shards/shard-commands.js';
import type { CommitEffects, ShardLifecycle, TransitionFields } from '../shards/shard-lifecycle.js';
import type { ShardRecord } from '../shards/shard-record.js';

/** What a LOST shard became on its host's return. */
export interface ShardReturn {
  readonly state: ShardState;
  readonly cause: TransitionCause;
  readonly fields: TransitionFields;
  readonly row: ShardRecord;
}

/**
 * A LOST shard whose host came back with its container running: what it takes again (its
 * reservation, its suspended cap, and for memory in host RAM a share of the host's budget)
 * decided by libs/limits
 * lostShardReturn against its GPUs and its host as they are now, and applied in the caller's
 * transaction. The host's row and then the GPUs' rows are locked before the decision (in the
 * order a suspend and placement lock them), so what was decided still holds when it is written.
 * Kept apart from registration and the heartbeat: every path that brings a host back calls it
 * (HostLivenessService.recoverLostShards).
 */
export class LostShardReturns {
  constructor(private readonly lifecycle: ShardLifecycle) {}

  async settle(
    tx: RawSql,
    shard: ShardRecord,
    memory: ObservedMemory,
    effects: CommitEffects,
    at: Date,
  ): Promise<ShardReturn> {
    const room = await lockReturnRoom(tx, shard);
    let decided: LostShardReturn = lostShardReturn(
      {
        memory,
        capBytesPerGpu: bytes(Number(shard.limitBytesPerGpu)),
        gpuCount: shard.gpuCount,
        resumeWanted: shard.resumeWantedAt !== null,
        suspendCause: suspendCauseOf(shard.suspendCause),
      },
      room,
    );
    // The conditional update agrees with the decision on the rows as locked; the check is kept
    // so that a disagreement fails the shard instead of passing a bound.
    if (
      (decided.kind === 'running' ||
        decided.kind === 'suspending' ||
        decided.kind === 'resuming') &&
      !(await this.lifecycle.reacquire(tx, shard, effects))
    ) {
      decided = { kind: 'failed', reason: GPUS_GIVEN_AWAY };
    }
    switch (decided.kind) {
      case 'running':
        return this.move(tx, shard, 'RUNNING', 'recovered', {}, effects, at);
      case 'resuming': {
        const back = await this.move(tx, shard, 'RESUMING', 'recovered', {}, effects, at);
        const hostId = shard.hostId!;
        const shardVersion = back.row.version;
        effects.command(
          { shardId: shard.id, hostId, command: 'resume', shardVersion, reason: 'host-back' },
          (commands) => commands.resume(hostId, shard.id, shardVersion),
        );
        return back;
      }
      case 'suspending': {
        // Half moved: the agent finishes the suspend (the reply lists it among the suspended,
        // and the command says so now); its SUSPENDED event releases the reservation taken
        // again above, as any suspend's does. Its last suspend's cause is kept.
        const back = await this.move(tx, shard, 'SUSPENDING', 'recovered', {}, effects, at);
        const hostId = shard.hostId!;
        const shardVersion = back.row.version;
        const cause = (shard.suspendCause ?? 'suspend-requested') as SuspendCommandCause;
        effects.command(
          {
            shardId: shard.id,
            hostId,
            command: 'suspend',
            cause,
            shardVersion,
            reason: 'host-back',
          },
          (commands) => commands.suspend(hostId, shard.id, cause, shardVersion),
        );
        return back;
      }
      case 'suspended':
        // Written before the move, which keeps it (moveMany leaves resume_wanted_at of a LOST
        // shard as it is), so that the published row has it.
        if (decided.resumeWanted && shard.resumeWantedAt === null) {
          await tx.$executeRaw`
            UPDATE shard SET resume_wanted_at = ${at} WHERE id = ${shard.id}::uuid`;
        }
        return this.move(tx, shard, 'SUSPENDED', 'recovered', {}, effects, at);
      case 'failed':
        return this.move(
          tx,
          shard,
          'FAILED',
          'host-back-without-it',
          { failureReason: decided.reason },
          effects,
          at,
        );
    }
  }

  private async move(
    tx: RawSql,
    shard: ShardRecord,
    state: ShardState,
    cause: TransitionCause,
    fields: TransitionFields,
    effects: CommitEffects,
    at: Date,
  ): Promise<ShardReturn> {
    const row = await this.lifecycle.moveTo(tx, shard, state, cause, fields, effects, at);
    return { state, cause, fields, row };
  }
}

/**
 * The shard's GPUs (those of its latest reservation) and its host's budget, as they are now,
 * row-locked until the transaction ends: the host's row first, as a suspend locks it to check
 * the budget (elastic-moves.ts), then the GPUs in uuid order, as placement locks them.
 */
async function lockReturnRoom(tx: RawSql, shard: ShardRecord): Promise<ReturnRoom> {
  const [host] = await tx.$queryRaw<{ budget: number; taken: number }[]>`
    SELECT host.suspend_budget_bytes::float8 AS budget,
           coalesce((SELECT sum(limit_bytes_per_gpu * gpu_count) FROM shard
                      WHERE host_id = host.id
                        AND state = ANY(${[...HOST_MEMORY_STATES]}::shard_state[])), 0)::float8
             AS taken
      FROM host WHERE id = ${shard.hostId} FOR NO KEY UPDATE`;
  const gpus = await tx.$queryRaw<
    {
      uuid: string;
      total: number;
      reserved: number;
      suspended: number;
      unowned: number;
      ratio: number;
      missing: boolean;
    }[]
  >`
    SELECT uuid, total_bytes::float8 AS total, reserved_bytes::float8 AS reserved,
           suspended_bytes::float8 AS suspended, unattributed_bytes::float8 AS unowned,
           overcommit_ratio AS ratio, missing_since IS NOT NULL AS missing
      FROM gpu
     WHERE uuid IN (SELECT gpu_uuid FROM shard_gpu
                     WHERE shard_id = ${shard.id}::uuid
                       AND reserved_at = (SELECT max(reserved_at) FROM shard_gpu
                                           WHERE shard_id = ${shard.id}::uuid))
     ORDER BY uuid FOR NO KEY UPDATE`;
  return {
    gpus: gpus.map((gpu) => ({
      uuid: gpu.uuid,
      totalBytes: bytes(gpu.total),
      reservedBytes: bytes(gpu.reserved),
      suspendedBytes: bytes(gpu.suspended),
      unownedBytes: bytes(gpu.unowned),
      overcommitRatio: gpu.ratio,
      ...(gpu.missing ? { missing: true } : {}),
    })),
    suspendBudgetBytes: host?.budget ?? 0,
    suspendedBytes: host?.taken ?? 0,
  };
}

function suspendCauseOf(stored: string | null): SuspendCause | null {
  return (SUSPEND_CAUSES as readonly string[]).includes(stored ?? '')
    ? (stored as SuspendCause)
    : null;
}

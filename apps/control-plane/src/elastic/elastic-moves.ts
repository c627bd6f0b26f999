import { Injectable } from '@nestjs/common';
import { HOST_MEMORY_STATES, type TransitionCause } from '@gpushards/limits';
import type { RawSql } from '../database/index.js';
import { NotSuspendableError } from '../errors/domain-errors.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import type { SuspendCause } from '../shards/shard-commands.js';
import type { ShardRecord } from '../shards/shard-record.js';
import { formatSize } from '../validation/sizes.js';

/** A host's room for suspended shards (docs/elastic.md), as its agent registered it. */
interface SuspendRoom {
  readonly budgetBytes: bigint;
  /** The caps of its shards in SUSPENDING, SUSPENDED and RESUMING. */
  readonly takenBytes: bigint;
  readonly unavailableReason: string | null;
}

/**
 * The writes of elastic memory (docs/elastic.md) that every decider shares (a user's
 * suspendShard and resumeShard, the idle policy, the queue's make-room, reclaim and resumes):
 * each in the caller's transaction, on a shard it locked; the agent's command is sent after
 * commit (CommitEffects), and the agent's reconcile converges if it is lost.
 */
@Injectable()
export class ElasticMoves {
  constructor(private readonly lifecycle: ShardLifecycle) {}

  /**
   * RUNNING → SUSPENDING for `cause`, and the agent told to move its memory to host RAM.
   * NOT_SUSPENDABLE when its host does not suspend or its budget would be passed.
   */
  async suspend(
    tx: RawSql,
    shard: ShardRecord,
    cause: SuspendCause & TransitionCause,
    effects: CommitEffects,
  ): Promise<ShardRecord> {
    const problem = await this.suspendProblem(tx, shard);
    if (problem !== undefined) throw new NotSuspendableError(problem);
    return this.suspendChecked(tx, shard, cause, effects);
  }

  /**
   * Why the shard's host cannot take its suspend now; undefined when it can. The host row is
   * locked until the transaction ends, so that two suspends cannot each fit alone.
   */
  async suspendProblem(tx: RawSql, shard: ShardRecord): Promise<string | undefined> {
    if (shard.hostId === null) return `shard ${shard.id} has no host: nothing to suspend`;
    const cap = shard.limitBytesPerGpu * BigInt(shard.gpuCount);
    return suspendProblem(shard.hostId, await lockSuspendRoom(tx, shard.hostId), cap);
  }

  /** `suspend` once `suspendProblem` found none in this transaction. */
  async suspendChecked(
    tx: RawSql,
    shard: ShardRecord,
    cause: SuspendCause & TransitionCause,
    effects: CommitEffects,
  ): Promise<ShardRecord> {
    const hostId = shard.hostId!;
    const updated = await this.lifecycle.moveTo(
      tx,
      shard,
      'SUSPENDING',
      cause,
      { suspendCause: cause },
      effects,
    );
    const shardVersion = updated.version;
    effects.command(
      { shardId: shard.id, hostId, command: 'suspend', cause, shardVersion },
      (commands) => commands.suspend(hostId, shard.id, cause, shardVersion),
    );
    return updated;
  }

  /**
   * SUSPENDED → RESUMING: its cap taken back on its own GPUs (canResume), and the agent told to
   * move its memory back. False, with nothing written, when a GPU lacks the room.
   */
  async resume(tx: RawSql, shard: ShardRecord, effects: CommitEffects): Promise<boolean> {
    const hostId = shard.hostId;
    if (hostId === null || !(await this.lifecycle.takeResume(tx, shard, effects))) return false;
    const { version: shardVersion } = await this.lifecycle.moveTo(
      tx,
      shard,
      'RESUMING',
      'resume-placed',
      {},
      effects,
    );
    effects.command({ shardId: shard.id, hostId, command: 'resume', shardVersion }, (commands) =>
      commands.resume(hostId, shard.id, shardVersion),
    );
    return true;
  }

  /**
   * A resume is wanted from `at` (a wake, its owner): kept if one already is. Only a shard
   * whose memory is going to or in host RAM; true when it is one.
   */
  async wantResume(tx: RawSql, shardId: string, at: Date): Promise<boolean> {
    const n = await tx.$executeRaw`
      UPDATE shard SET resume_wanted_at = coalesce(resume_wanted_at, ${at})
       WHERE id = ${shardId}::uuid AND state IN ('SUSPENDING', 'SUSPENDED')`;
    return n > 0;
  }
}

/** The host's suspend budget and what is taken of it, the host row locked until commit. */
async function lockSuspendRoom(tx: RawSql, hostId: string): Promise<SuspendRoom> {
  const [row] = await tx.$queryRaw<{ budget: bigint; taken: bigint; reason: string | null }[]>`
    SELECT host.suspend_budget_bytes AS budget, host.suspend_unavailable_reason AS reason,
           coalesce((SELECT sum(limit_bytes_per_gpu * gpu_count) FROM shard
                      WHERE host_id = host.id
                        AND state = ANY(${[...HOST_MEMORY_STATES]}::shard_state[])), 0)::bigint
             AS taken
      FROM host WHERE id = ${hostId} FOR NO KEY UPDATE`;
  return {
    budgetBytes: row?.budget ?? 0n,
    takenBytes: row?.taken ?? 0n,
    unavailableReason: row?.reason ?? null,
  };
}

/** Why a suspend of `cap` bytes does not fit the host's room; undefined when it does. */
function suspendProblem(hostId: string, room: SuspendRoom, cap: bigint): string | undefined {
  if (room.budgetBytes <= 0n) {
    return (
      `host ${hostId} does not suspend shards` +
      (room.unavailableReason === null ? '' : `: ${room.unavailableReason}`) +
      ' (docs/elastic.md, "For operators")'
    );
  }
  if (room.takenBytes + cap > room.budgetBytes) {
    return (
      `host ${hostId}'s host RAM for suspended shards is taken: ` +
      `${formatSize(Number(room.takenBytes))} of its ${formatSize(Number(room.budgetBytes))} budget ` +
      `(GPUSHARDS_SUSPEND_BUDGET) is in use, and this shard needs ${formatSize(Number(cap))}`
    );
  }
  return undefined;
}

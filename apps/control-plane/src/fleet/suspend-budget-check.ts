import {
  HOST_MEMORY_STATES,
  suspendBudgetRelief,
  type BudgetRelief,
  bytes,
} from '@gpushards/limits';
import type { RawSql } from '../database/index.js';
import { ElasticMoves } from '../elastic/elastic-moves.js';
import type { Logger } from '../logging/logger.js';
import type { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import { lockHostShards } from './fleet-statements.js';

/**
 * A host's budget for suspended shards checked against what its shards hold in host RAM, after
 * its agent registered it (docs/elastic.md, "For operators"): an agent restarted with a
 * smaller GPUSHARDS_SUSPEND_BUDGET, its host never lost, leaves its SUSPENDED shards over it
 * with nothing else to check them (a lost host's shards are checked on their return,
 * LostShardReturns). libs/limits suspendBudgetRelief decides: SUSPENDED shards whose GPUs have
 * room are resumed until the caps fit; the rest stay SUSPENDED, the host over its budget until
 * resumes, stops and deletes bring it under, every suspend there refused meanwhile
 * (ElasticMoves.suspendProblem counts what is held). Applied in the registration's
 * transaction, whose upsert holds the host row: one statement when the host is within its
 * budget (nearly always); else its shards in host RAM states, then its GPUs, are locked (the
 * order a return locks them in) before the decision.
 */
export class SuspendBudgetCheck {
  private readonly moves: ElasticMoves;

  constructor(
    lifecycle: ShardLifecycle,
    private readonly logger: Logger,
  ) {
    this.moves = new ElasticMoves(lifecycle);
  }

  async settle(tx: RawSql, hostId: string, effects: CommitEffects): Promise<BudgetRelief> {
    const within = { resume: [], overBytes: 0 };
    const [host] = await tx.$queryRaw<{ budget: number; held: number }[]>`
      SELECT host.suspend_budget_bytes::float8 AS budget,
             coalesce((SELECT sum(limit_bytes_per_gpu * gpu_count) FROM shard
                        WHERE host_id = host.id
                          AND state = ANY(${[...HOST_MEMORY_STATES]}::shard_state[])), 0)::float8
               AS held
        FROM host WHERE id = ${hostId}`;
    if (host === undefined || host.held <= host.budget) return within;
    const shards = await lockHostShards(tx, hostId, HOST_MEMORY_STATES);
    const gpus = await tx.$queryRaw<
      { uuid: string; total: number; reserved: number; unowned: number; missing: boolean }[]
    >`
      SELECT uuid, total_bytes::float8 AS total, reserved_bytes::float8 AS reserved,
             unattributed_bytes::float8 AS unowned, missing_since IS NOT NULL AS missing
        FROM gpu WHERE host_id = ${hostId} ORDER BY uuid FOR NO KEY UPDATE`;
    const latest = await tx.$queryRaw<{ shardId: string; uuid: string }[]>`
      SELECT row.shard_id::text AS "shardId", row.gpu_uuid AS uuid
        FROM shard_gpu row
       WHERE row.shard_id = ANY(${shards.map((shard) => shard.id)}::uuid[])
         AND row.reserved_at = (SELECT max(reserved_at) FROM shard_gpu
                                 WHERE shard_id = row.shard_id)`;
    const gpusOf = new Map<string, string[]>();
    for (const { shardId, uuid } of latest) {
      gpusOf.set(shardId, [...(gpusOf.get(shardId) ?? []), uuid]);
    }
    const relief = suspendBudgetRelief(
      host.budget,
      shards.map((shard) => ({
        id: shard.id,
        state: shard.state,
        capBytesPerGpu: bytes(Number(shard.limitBytesPerGpu)),
        gpuCount: shard.gpuCount,
        gpuUuids: gpusOf.get(shard.id) ?? [],
        resumeWanted: shard.resumeWantedAt !== null,
      })),
      gpus.map((gpu) => ({
        uuid: gpu.uuid,
        totalBytes: bytes(gpu.total),
        reservedBytes: bytes(gpu.reserved),
        unownedBytes: bytes(gpu.unowned),
        ...(gpu.missing ? { missing: true } : {}),
      })),
    );
    const byId = new Map(shards.map((shard) => [shard.id, shard]));
    const resumed: string[] = [];
    for (const id of relief.resume) {
      // The conditional update agrees with the decision on the rows as locked; a disagreement
      // leaves the shard SUSPENDED (counted in what stays over), never past a GPU's bound.
      if (await this.moves.resume(tx, byId.get(id)!, effects)) resumed.push(id);
    }
    const kept = relief.resume.filter((id) => !resumed.includes(id));
    const over = relief.overBytes + kept.reduce((sum, id) => sum + capsOf(byId.get(id)!), 0);
    this.logger.warn(
      { hostId, budgetBytes: host.budget, heldBytes: host.held, resumed, overBytes: over },
      over > 0
        ? "host's suspend budget (GPUSHARDS_SUSPEND_BUDGET) is below what its suspended shards hold and its GPUs have no room for the rest: they stay suspended, and suspends on it are refused until it fits"
        : "host's suspend budget (GPUSHARDS_SUSPEND_BUDGET) is below what its suspended shards held: resuming some",
    );
    return { resume: resumed, overBytes: over };
  }
}

function capsOf(shard: { limitBytesPerGpu: bigint; gpuCount: number }): number {
  return Number(shard.limitBytesPerGpu) * shard.gpuCount;
}

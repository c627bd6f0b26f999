import { Inject, Injectable } from '@nestjs/common';
import type { ShardWake } from '@gpushards/protocol';
import { AuditService } from '../audit/audit.service.js';
import type { Caller } from '../auth/caller.js';
import { PrismaService } from '../database/index.js';
import { BadUserInputError, ConflictError, NotFoundError } from '../errors/domain-errors.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { QueueSignal } from '../placement/queue-signal.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import type { ShardRecord } from '../shards/shard-record.js';
import { checkId } from '../validation/input.js';
import { ElasticMoves } from './elastic-moves.js';

/** The most an admin may oversubscribe a GPU's memory by (caps on it and suspended). */
export const MAX_OVERCOMMIT_RATIO = 16;

/**
 * Elastic memory as people and agents ask for it (docs/elastic.md): a user's suspendShard and
 * resumeShard, an agent's wake (a process of a suspended shard asked for the GPU), and an
 * admin's oversubscription ratio. A resume is only wanted here; the queue decides when the
 * shard's own GPUs have room (QueueService, libs/limits admit) and ElasticMoves does it.
 */
@Injectable()
export class ElasticService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly lifecycle: ShardLifecycle,
    private readonly moves: ElasticMoves,
    private readonly queue: QueueSignal,
    private readonly cache: FleetCache,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'elastic' });
  }

  /**
   * RUNNING → SUSPENDING (its owner asked: any shard, elastic or not); already suspending or
   * suspended: unchanged. NOT_SUSPENDABLE when its host cannot take it; CONFLICT in any other
   * state.
   */
  async suspend(caller: Caller, id: string): Promise<ShardRecord> {
    const shardId = checkId('id', id);
    const effects = new CommitEffects();
    const shard = await this.prisma.$transaction(async (tx) => {
      const shard = await this.lifecycle.lockVisible(tx, caller, shardId, id);
      if (shard.state === 'SUSPENDING' || shard.state === 'SUSPENDED') return shard;
      if (shard.state !== 'RUNNING') {
        throw new ConflictError(
          `only a RUNNING shard can be suspended; shard ${id} is ${shard.state}` +
            (shard.state === 'RESUMING' ? ' (suspend it once it runs again)' : ''),
        );
      }
      const updated = await this.moves.suspend(tx, shard, 'suspend-requested', effects);
      await this.audit.record(tx, caller, {
        action: 'shard.suspend',
        targetType: 'Shard',
        targetId: shard.id,
        teamId: shard.teamId,
        details: { hostId: shard.hostId },
      });
      return updated;
    });
    this.lifecycle.afterCommit(effects);
    return shard;
  }

  /**
   * Asks for the shard's memory back: SUSPENDED (or still SUSPENDING) → its resume is wanted,
   * and the queue resumes it when its own GPUs have room. Already resuming or running:
   * unchanged. CONFLICT in any other state.
   */
  async resume(caller: Caller, id: string): Promise<ShardRecord> {
    const shardId = checkId('id', id);
    const shard = await this.prisma.$transaction(async (tx) => {
      const shard = await this.lifecycle.lockVisible(tx, caller, shardId, id);
      if (shard.state === 'RESUMING' || shard.state === 'RUNNING') return shard;
      if (shard.state !== 'SUSPENDED' && shard.state !== 'SUSPENDING') {
        throw new ConflictError(
          `only a SUSPENDED shard can be resumed; shard ${id} is ${shard.state}`,
        );
      }
      if (shard.resumeWantedAt !== null && shard.state === 'SUSPENDED') return shard;
      await this.moves.wantResume(tx, shard.id, new Date());
      await this.audit.record(tx, caller, {
        action: 'shard.resume',
        targetType: 'Shard',
        targetId: shard.id,
        teamId: shard.teamId,
        details: { hostId: shard.hostId, state: shard.state },
      });
      return (await this.lifecycle.lock(tx, shard.id))!;
    });
    this.queue.committed({ entered: [], left: [], freed: true });
    return shard;
  }

  /**
   * A process of a suspended shard asked for the GPU (libvgpu.so rang its bell; the agent
   * forwards it): its resume is wanted from the first ring. Ignored for a shard of another
   * host or one whose memory is not in host RAM (a late repeat after its resume).
   */
  async wake(hostId: string, wake: ShardWake): Promise<boolean> {
    const shardId = wake.shardId.toLowerCase();
    const at = new Date(wake.at);
    const wanted = await this.prisma.$transaction(async (tx) => {
      const shard = await this.lifecycle.lock(tx, shardId);
      if (shard === undefined || shard.hostId !== hostId) return false;
      return this.moves.wantResume(tx, shardId, at);
    });
    if (wanted) {
      this.logger.info({ shardId, hostId, requests: wake.requests }, 'wake: resume wanted');
      this.queue.committed({ entered: [], left: [], freed: true });
    }
    return wanted;
  }

  /**
   * The oversubscription ratio of a host's GPUs (all, or one): the caps of its shards, on it
   * and suspended, may add up to floor(total × ratio); only elastic shards pass its memory,
   * since a resident reservation never does. 1 turns oversubscription off.
   */
  async setOvercommit(
    caller: Caller,
    hostIdArgument: string,
    gpuUuid: string | null,
    ratio: number,
  ): Promise<number> {
    if (!Number.isFinite(ratio) || ratio < 1 || ratio > MAX_OVERCOMMIT_RATIO) {
      throw BadUserInputError.of(
        'ratio',
        `must be a number from 1 (no oversubscription) to ${MAX_OVERCOMMIT_RATIO}, got ${ratio}`,
      );
    }
    const changed = await this.prisma.$transaction(async (tx) => {
      const rows = await tx.$queryRaw<{ uuid: string }[]>`
        UPDATE gpu SET overcommit_ratio = ${ratio}
         WHERE host_id = ${hostIdArgument}
           AND (${gpuUuid}::text IS NULL OR uuid = ${gpuUuid}::text)
           AND reserved_bytes + suspended_bytes <= floor(total_bytes * ${ratio}::float8)
        RETURNING uuid`;
      const [count] = await tx.$queryRaw<{ n: number }[]>`
        SELECT count(*)::int AS n FROM gpu
         WHERE host_id = ${hostIdArgument} AND (${gpuUuid}::text IS NULL OR uuid = ${gpuUuid}::text)`;
      const n = count?.n ?? 0;
      if (n === 0) {
        throw gpuUuid === null
          ? new NotFoundError('host', hostIdArgument)
          : new NotFoundError('GPU', gpuUuid);
      }
      if (rows.length !== n) {
        throw new ConflictError(
          `ratio ${ratio} leaves less than the caps already on ${n - rows.length} of the GPUs (resident and suspended); suspended shards would have no room to come back. Stop or resume shards first`,
        );
      }
      await this.audit.record(tx, caller, {
        action: 'gpu.overcommit',
        targetType: 'Host',
        targetId: hostIdArgument,
        teamId: null,
        details: { ratio, gpus: rows.map((row) => row.uuid) },
      });
      return rows.length;
    });
    // The change feed does not carry ratios: the cache reads every GPU again.
    this.cache.requestRefresh();
    this.queue.committed({ entered: [], left: [], freed: true });
    this.logger.info(
      { hostId: hostIdArgument, gpuUuid, ratio, gpus: changed, actorTokenId: caller.tokenId },
      'GPU oversubscription ratio set',
    );
    return changed;
  }
}

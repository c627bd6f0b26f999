import { Injectable } from '@nestjs/common';
import {
  describeComputeRefusal,
  holdsReservation,
  isolatedShareChangeRefusal,
  resizeComputeShare,
  type ComputeShare,
} from '@gpushards/limits';
import { AuditService } from '../audit/audit.service.js';
import type { Caller } from '../auth/caller.js';
import { canSeeTeam } from '../auth/team-scope.js';
import { lockTeamForUpdate, PrismaService, type ComputeMode } from '../database/index.js';
import { ConflictError, NoCapacityError, NotFoundError } from '../errors/domain-errors.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';
import { readTeamState } from '../shards/team-quota.js';
import { checkId, InputCheck } from '../validation/input.js';
import {
  checkComputeInput,
  computeSpecOf,
  teamComputePolicyOf,
  teamComputeRefusal,
} from './compute-input.js';

/**
 * Changing a shard's compute share (setShardCompute), like resizeShard changes its memory:
 * load (the team's bound, the GPUs' guaranteed totals, rows locked), decide
 * (libs/limits resizeComputeShare), apply (the GPUs' totals by the difference, with the same
 * condition placement uses, the live reservations, the shard) in one transaction; then the
 * host's agent is told, and writes it into the shard's limits file, where libvgpu.so reads it
 * at the shard's next turn. An ISOLATED shard is an MPS client whose percentage is fixed when
 * its process starts: while it holds its GPUs its share and mode stay (CONFLICT), and no shard
 * that holds its GPUs becomes ISOLATED.
 */
@Injectable()
export class ComputeShareService {
  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly lifecycle: ShardLifecycle,
  ) {}

  async setCompute(
    caller: Caller,
    id: string,
    sharePercent: number | null | undefined,
    mode: ComputeMode | null | undefined,
  ): Promise<ShardRecord> {
    const shardId = checkId('id', id);
    const check = new InputCheck();
    const share = checkComputeInput(check, 'input', sharePercent, mode);
    check.done();
    const unlocked = await this.prisma.shard.findUnique({
      where: { id: shardId },
      select: { teamId: true },
    });
    if (unlocked === null || !canSeeTeam(caller, unlocked.teamId)) {
      throw new NotFoundError('shard', id);
    }
    const effects = new CommitEffects();
    const shard = await this.prisma.$transaction(async (tx) => {
      await lockTeamForUpdate(tx, unlocked.teamId);
      const shard = await this.lifecycle.lock(tx, shardId);
      if (shard === undefined || !canSeeTeam(caller, shard.teamId)) {
        throw new NotFoundError('shard', id);
      }
      const holding = holdsReservation(shard.state) && shard.state !== 'STOPPING';
      if (!holding && shard.state !== 'PENDING') {
        throw new ConflictError(
          `only a PENDING, PLACED, STARTING or RUNNING shard can change its compute share; shard ${id} is ${shard.state}`,
        );
      }
      if (share.sharePermille === shard.computeSharePermille && share.mode === shard.computeMode) {
        return shard;
      }
      const current = { sharePermille: shard.computeSharePermille, mode: shard.computeMode };
      const fixed = holding ? isolatedShareChangeRefusal(current, share) : undefined;
      if (fixed !== undefined) {
        throw new ConflictError(`shard ${id}: ${describeComputeRefusal(fixed)}`);
      }
      const team = await readTeamState(tx, shard.teamId);
      if (team === undefined) throw new NotFoundError('team', shard.teamId);
      const refusal = teamComputeRefusal(share, team.maxComputeSharePercent);
      if (refusal !== undefined) throw refusal;
      const delta = share.sharePermille - shard.computeSharePermille;
      let gpus: { uuid: string; limitBytes: number }[] = [];
      if (holding) {
        gpus = await this.takeGpus(tx, shard, share, delta, team.maxComputeSharePercent);
        for (const gpu of gpus)
          effects.gpuDeltas.push({ uuid: gpu.uuid, bytes: 0, permille: delta });
      }
      const rows = await tx.$queryRaw<ShardRecord[]>`
        UPDATE shard SET compute_share_permille = ${share.sharePermille}::int,
                         compute_mode = ${share.mode}::compute_mode,
                         version = version + 1, updated_at = now()
         WHERE id = ${shardId}::uuid
        RETURNING ${SHARD_COLUMNS}`;
      await this.audit.record(tx, caller, {
        action: 'shard.compute',
        targetType: 'Shard',
        targetId: shardId,
        teamId: shard.teamId,
        details: {
          fromSharePermille: shard.computeSharePermille,
          fromMode: shard.computeMode,
          toSharePermille: share.sharePermille,
          toMode: share.mode,
        },
      });
      if (holding && shard.hostId !== null && gpus.length > 0) {
        const hostId = shard.hostId;
        const compute = computeSpecOf(share);
        effects.command({ shardId, hostId, command: 'resize', compute: 'share' }, (commands) =>
          commands.resize(hostId, shardId, gpus, compute),
        );
      }
      return rows[0]!;
    });
    this.lifecycle.afterCommit(effects);
    return shard;
  }

  /**
   * Locks the shard's live GPUs, decides the new share against what the others guarantee there,
   * and moves each GPU's total and live reservation to it. Returns the GPUs with their caps.
   */
  private async takeGpus(
    tx: Parameters<Parameters<PrismaService['$transaction']>[0]>[0],
    shard: ShardRecord,
    share: ComputeShare,
    delta: number,
    maxComputeSharePercent: number | null,
  ): Promise<{ uuid: string; limitBytes: number }[]> {
    const live = await tx.$queryRaw<
      { uuid: string; guaranteed: number; isolated: number; pool: number }[]
    >`
      SELECT gpu.uuid, gpu.guaranteed_compute_permille AS guaranteed,
             gpu.isolated_compute_permille AS isolated, gpu.isolated_pool_permille AS pool
        FROM gpu
       WHERE gpu.uuid IN (SELECT gpu_uuid FROM shard_gpu
                           WHERE shard_id = ${shard.id}::uuid AND released_at IS NULL)
       ORDER BY gpu.uuid FOR UPDATE`;
    const current = { sharePermille: shard.computeSharePermille, mode: shard.computeMode };
    const ownIsolated = current.mode === 'ISOLATED' ? current.sharePermille : 0;
    const decision = resizeComputeShare(
      {
        sharePercent: share.sharePermille === 0 ? null : share.sharePermille / 10,
        mode: share.mode,
      },
      teamComputePolicyOf(maxComputeSharePercent),
      live.map((gpu) => ({
        gpuUuid: gpu.uuid,
        othersPermille: Math.max(0, gpu.guaranteed - shard.computeSharePermille),
        othersIsolatedPermille: Math.max(0, gpu.isolated - ownIsolated),
        isolatedPoolPermille: gpu.pool,
      })),
      current,
    );
    if (!decision.ok && decision.refusal.kind === 'isolated-share-fixed') {
      throw new ConflictError(`shard ${shard.id}: ${describeComputeRefusal(decision.refusal)}`);
    }
    if (!decision.ok) {
      const message = `shard ${shard.id} cannot take this compute share: ${describeComputeRefusal(decision.refusal)}`;
      const host = await tx.host.findUnique({ where: { id: shard.hostId ?? '' } });
      throw new NoCapacityError(message, [
        {
          hostId: shard.hostId ?? '',
          hostName: host?.name ?? shard.hostId ?? '',
          reason: describeComputeRefusal(decision.refusal),
        },
      ]);
    }
    const uuids = live.map((gpu) => gpu.uuid);
    // Isolated shares never change here (refused above), so the isolated total stays.
    const changed = await tx.$queryRaw<{ uuid: string }[]>`
      UPDATE gpu SET guaranteed_compute_permille = guaranteed_compute_permille + ${delta}::int
       WHERE uuid = ANY(${uuids}::text[])
         AND guaranteed_compute_permille + ${delta}::int BETWEEN 0 AND 1000
         AND gpu_compute_fits(guaranteed_compute_permille, isolated_compute_permille,
                              isolated_pool_permille, ${delta}::int, 0)
      RETURNING uuid`;
    if (changed.length !== uuids.length) {
      throw new Error(`shard ${shard.id}: a GPU's guaranteed compute changed while locked`);
    }
    await tx.$executeRaw`
      UPDATE shard_gpu SET compute_share_permille = ${share.sharePermille}::int
       WHERE shard_id = ${shard.id}::uuid AND released_at IS NULL`;
    return uuids.map((uuid) => ({ uuid, limitBytes: Number(shard.limitBytesPerGpu) }));
  }
}

/**
 * Applies an admission pass's placements in three statements, whatever their number: the GPUs
 * locked in UUID order and then the shards (one statement), every GPU's reservation raised by
 * one conditional update that also sets the shards' host and opens their reservation rows
 * (one), the shards moved PENDING → PLACED with their stored events (ShardLifecycle.moveMany,
 * one). A
 * GPU without room (another control plane or a createShard took it since the fleet was read)
 * or a host no longer ONLINE fails the whole pass with StalePlan, naming the hosts to read again.
 * Returns the placements' shards that were no longer PENDING (cancelled since the pass read the
 * queue): not placed.
 */
import type { Placement } from '@gpushards/limits';
import type { RawSql } from '../database/index.js';
import { tryLaunchSpecOf } from '../shards/launch-spec.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';
import {
  reservationsInsert,
  type CommitEffects,
  type ShardLifecycle,
  type ShardMove,
} from '../shards/shard-lifecycle.js';

export class StalePlan extends Error {
  constructor(readonly hostIds: readonly string[]) {
    super('GPUs changed since the admission pass read them');
  }
}

export async function applyPlacements(
  tx: RawSql,
  lifecycle: ShardLifecycle,
  placements: readonly Placement[],
  effects: CommitEffects,
): Promise<string[]> {
  if (placements.length === 0) return [];
  const all = [...new Set(placements.flatMap((p) => p.placed.gpuUuids))].sort();
  const ids = placements.map((p) => p.shardId);
  // The GPUs first, in UUID order, then the shards in id order, as every batch locks them (so
  // two cannot wait on each other): the uncorrelated count is evaluated once, before the first
  // shard row is locked, and counts (so locks) every GPU row.
  const locked = await tx.$queryRaw<ShardRecord[]>`
    SELECT ${SHARD_COLUMNS} FROM shard
     WHERE id = ANY(${ids}::uuid[])
       AND (SELECT count(*) FROM (SELECT uuid FROM gpu WHERE uuid = ANY(${all}::text[])
                                   ORDER BY uuid FOR UPDATE) gpus) >= 0
     ORDER BY id FOR NO KEY UPDATE`;
  const byId = new Map(locked.map((shard) => [shard.id, shard]));
  // Only shards still PENDING (a delete may have cancelled one since the pass read the queue).
  const live = placements.flatMap((placement) => {
    const shard = byId.get(placement.shardId);
    return shard?.state === 'PENDING' ? [{ placement, shard }] : [];
  });
  const skipped = placements
    .filter((placement) => byId.get(placement.shardId)?.state !== 'PENDING')
    .map((placement) => placement.shardId);
  if (live.length === 0) return skipped;

  // Per GPU: what this pass adds (several placements may share a GPU).
  const perGpu = new Map<
    string,
    { hostId: string; bytes: bigint; permille: number; isolated: number }
  >();
  for (const { placement, shard } of live) {
    const { hostId, gpuUuids, reservedBytesPerGpu } = placement.placed;
    const isolated = shard.computeMode === 'ISOLATED' ? shard.computeSharePermille : 0;
    for (const uuid of gpuUuids) {
      const sum = perGpu.get(uuid) ?? { hostId, bytes: 0n, permille: 0, isolated: 0 };
      sum.bytes += BigInt(reservedBytesPerGpu);
      sum.permille += shard.computeSharePermille;
      sum.isolated += isolated;
      perGpu.set(uuid, sum);
    }
  }
  const uuids = [...perGpu.keys()];
  const rows = [...perGpu.values()];
  const hostIds = [...new Set(rows.map((row) => row.hostId))];
  // The shards' host is set and their reservation rows opened in the same statement: a GPU
  // that no longer has the room throws StalePlan below and rolls the whole transaction back,
  // those writes with it.
  const reserved = reservationsInsert(
    live.map(({ placement }) => ({
      shardId: placement.shardId,
      gpuUuids: placement.placed.gpuUuids,
      size: BigInt(placement.placed.reservedBytesPerGpu),
    })),
  )!;
  const taken = await tx.$queryRaw<{ uuid: string }[]>`
    WITH reserved AS (${reserved}), hosted AS (
      UPDATE shard SET host_id = placed.host_id, limit_bytes_per_gpu = placed.size,
                       failure_reason = NULL
        FROM unnest(${live.map((l) => l.shard.id)}::uuid[],
                    ${live.map((l) => l.placement.placed.hostId)}::text[],
                    ${live.map((l) => BigInt(l.placement.placed.reservedBytesPerGpu))}::bigint[])
             AS placed(id, host_id, size)
       WHERE shard.id = placed.id)
    UPDATE gpu SET reserved_bytes = gpu.reserved_bytes + added.bytes,
                   guaranteed_compute_permille = gpu.guaranteed_compute_permille + added.permille,
                   isolated_compute_permille = gpu.isolated_compute_permille + added.isolated
      FROM unnest(${uuids}::text[], ${rows.map((r) => r.hostId)}::text[],
                  ${rows.map((r) => r.bytes)}::bigint[], ${rows.map((r) => r.permille)}::int[],
                  ${rows.map((r) => r.isolated)}::int[])
           AS added(uuid, host_id, bytes, permille, isolated)
     WHERE gpu.uuid = added.uuid AND gpu.host_id = added.host_id
       AND gpu.host_id IN (SELECT id FROM host WHERE id = ANY(${hostIds}::text[])
                              AND state = 'ONLINE' FOR SHARE)
       AND gpu.missing_since IS NULL
       AND gpu_memory_fits(gpu.total_bytes, gpu.reserved_bytes, gpu.suspended_bytes,
                           gpu.unattributed_bytes, gpu.overcommit_ratio, added.bytes)
       AND gpu_compute_fits(gpu.guaranteed_compute_permille, gpu.isolated_compute_permille,
                            gpu.isolated_pool_permille, added.permille, added.isolated)
    RETURNING gpu.uuid`;
  if (taken.length !== uuids.length) {
    const got = new Set(taken.map((row) => row.uuid));
    throw new StalePlan([
      ...new Set(uuids.filter((uuid) => !got.has(uuid)).map((uuid) => perGpu.get(uuid)!.hostId)),
    ]);
  }
  for (const [uuid, sum] of perGpu) {
    effects.gpuDeltas.push({
      uuid,
      bytes: Number(sum.bytes),
      permille: sum.permille,
      isolatedPermille: sum.isolated,
    });
  }
  const moves: ShardMove[] = live.map(({ placement, shard }) => ({
    shard: {
      ...shard,
      hostId: placement.placed.hostId,
      limitBytesPerGpu: BigInt(placement.placed.reservedBytesPerGpu),
      failureReason: null,
    },
    state: 'PLACED',
    cause: 'placed',
    fields: {},
  }));
  const updated = await lifecycle.moveMany(tx, moves, effects);
  const unopenable: ShardMove[] = [];
  updated.forEach((shard, i) => {
    const { placed } = live[i]!.placement;
    const opened = tryLaunchSpecOf(shard, placed.gpuUuids);
    if ('unopenable' in opened) {
      unopenable.push({
        shard,
        state: 'FAILED',
        cause: 'failed',
        fields: { failureReason: opened.unopenable },
      });
      return;
    }
    const hostId = placed.hostId;
    effects.command({ shardId: shard.id, hostId, command: 'launch', from: 'queue' }, (commands) =>
      commands.launch(hostId, opened.spec),
    );
  });
  // Its secret env does not open here, so no launch can be sent: it ends FAILED in the same
  // transaction, its reservation released again (its failureReason names the key).
  await lifecycle.moveMany(tx, unopenable, effects);
  return skipped;
}

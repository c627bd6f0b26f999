/**
 * Applies an admission pass's placements in two statements, whatever their number: one locks
 * the GPUs in UUID order and then the shards, and for the shards still PENDING raises every
 * GPU's reservation by one conditional update, sets their host and opens their reservation
 * rows; the other moves them PENDING → PLACED with their stored events (ShardLifecycle.moveMany).
 * A GPU without room (another control plane or a createShard took it since the fleet was read)
 * or a host no longer ONLINE fails the whole pass with StalePlan, naming the hosts to read again.
 * Returns the placements' shards that were no longer PENDING (cancelled since the pass read the
 * queue): not placed.
 */
import type { Placement } from '@gpushards/limits';
import { Prisma, type RawSql } from '../database/index.js';
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
  const chosen = placements.flatMap(({ shardId, placed }) =>
    placed.gpuUuids.map((uuid) => ({
      shardId,
      hostId: placed.hostId,
      uuid,
      size: BigInt(placed.reservedBytesPerGpu),
    })),
  );
  // One statement. The GPUs are locked first, in UUID order, then the shards in id order, as
  // every batch locks them (so two cannot wait on each other): the uncorrelated count is
  // evaluated once, before the first shard row is locked, and counts (so locks) every GPU
  // row. Only the shards still PENDING as locked (a delete may have cancelled one since the
  // pass read the queue) are written: each GPU's reserved bytes and compute shares rise by
  // the sum of those placed on it, where it still has the room and its host is ONLINE; their
  // host is set and their reservation rows opened. A GPU that no longer has the room is
  // missing from "takenUuids": StalePlan below rolls the whole transaction back, those writes
  // with it. Prepared once per connection (its text is the same whatever the placements) and
  // planned generically (admission_pass_state set it for the pass's transaction): planning it
  // cost PostgreSQL more than running it (1.6 against 1.3 ms a pass).
  const rows = await tx.$queryRaw<(ShardRecord & { takenUuids: string[] | null })[]>`
    /* prepared:admission_placements */
    WITH gpus AS (
      SELECT uuid FROM gpu WHERE uuid = ANY(${all}::text[]) ORDER BY uuid FOR UPDATE
    ), locked AS (
      SELECT ${SHARD_COLUMNS} FROM shard
       WHERE id = ANY(${ids}::uuid[]) AND (SELECT count(*) FROM gpus) >= 0
       ORDER BY id FOR NO KEY UPDATE
    ), live AS (
      SELECT * FROM locked WHERE state = 'PENDING'
    ), chosen AS (
      SELECT chosen.*, live."computeSharePermille" AS permille,
             CASE WHEN live."computeMode" = 'ISOLATED' THEN live."computeSharePermille"
                  ELSE 0 END AS isolated
        FROM unnest(${chosen.map((c) => c.shardId)}::uuid[],
                    ${chosen.map((c) => c.hostId)}::text[],
                    ${chosen.map((c) => c.uuid)}::text[],
                    ${chosen.map((c) => c.size)}::bigint[]) AS chosen(shard_id, host_id, uuid, size)
        JOIN live ON live.id = chosen.shard_id::text
    ), reserved AS (${reservationsInsert(
      placements.map((p) => ({
        shardId: p.shardId,
        gpuUuids: p.placed.gpuUuids,
        size: BigInt(p.placed.reservedBytesPerGpu),
      })),
      Prisma.sql`SELECT id::uuid FROM live`,
    )!}), hosted AS (
      UPDATE shard SET host_id = placed.host_id, limit_bytes_per_gpu = placed.size,
                       failure_reason = NULL
        FROM (SELECT DISTINCT shard_id, host_id, size FROM chosen) AS placed
       WHERE shard.id = placed.shard_id
    ), added AS (
      SELECT uuid, host_id, sum(size)::bigint AS bytes, sum(permille)::int AS permille,
             sum(isolated)::int AS isolated
        FROM chosen GROUP BY uuid, host_id
    ), taken AS (
      UPDATE gpu SET reserved_bytes = gpu.reserved_bytes + added.bytes,
                     guaranteed_compute_permille = gpu.guaranteed_compute_permille + added.permille,
                     isolated_compute_permille = gpu.isolated_compute_permille + added.isolated
        FROM added
       WHERE gpu.uuid = added.uuid AND gpu.host_id = added.host_id
         AND gpu.uuid = ANY(${all}::text[])
         AND gpu.uuid IN (SELECT uuid FROM gpus)
         AND gpu.host_id IN (SELECT id FROM host
                              WHERE id = ANY(${[...new Set(chosen.map((c) => c.hostId))]}::text[])
                                AND state = 'ONLINE' FOR SHARE)
         AND gpu.missing_since IS NULL
         AND gpu_memory_fits(gpu.total_bytes, gpu.reserved_bytes, gpu.suspended_bytes,
                             gpu.unattributed_bytes, gpu.overcommit_ratio, added.bytes)
         AND gpu_compute_fits(gpu.guaranteed_compute_permille, gpu.isolated_compute_permille,
                              gpu.isolated_pool_permille, added.permille, added.isolated)
      RETURNING gpu.uuid
    )
    SELECT locked.*, (SELECT array_agg(uuid) FROM taken) AS "takenUuids" FROM locked`;
  const byId = new Map(rows.map(({ takenUuids: _taken, ...shard }) => [shard.id, shard]));
  const live = placements.flatMap((placement) => {
    const shard = byId.get(placement.shardId);
    return shard?.state === 'PENDING' ? [{ placement, shard }] : [];
  });
  const skipped = placements
    .filter((placement) => byId.get(placement.shardId)?.state !== 'PENDING')
    .map((placement) => placement.shardId);
  if (live.length === 0) return skipped;

  // Per GPU: what this pass added (several placements may share a GPU).
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
  const got = new Set(rows[0]?.takenUuids ?? []);
  const missed = [...perGpu.keys()].filter((uuid) => !got.has(uuid));
  if (missed.length > 0) {
    throw new StalePlan([...new Set(missed.map((uuid) => perGpu.get(uuid)!.hostId))]);
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

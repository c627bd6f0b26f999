import type { Placed } from '@gpushards/limits';
import type { Caller } from '../auth/caller.js';
import type { RawSql } from '../database/index.js';
import { requestFingerprint } from './idempotency.js';
import type { ShardRequest } from './shard-input.js';
import { SHARD_COLUMNS, type ShardRecord } from './shard-record.js';

/** A shard a batch of createShard calls means to write, on the GPUs placement chose. */
export interface PlannedShard {
  readonly shardId: string;
  readonly auditId: string;
  readonly caller: Caller;
  readonly teamId: string;
  readonly request: ShardRequest;
  readonly placed: Placed;
}

/** The shards already created under these (team, idempotency key) pairs, by `${teamId}/${key}`. */
export async function findByIdempotencyKeys(
  tx: RawSql,
  keys: readonly { teamId: string; key: string }[],
): Promise<Map<string, ShardRecord>> {
  if (keys.length === 0) return new Map();
  const rows = await tx.$queryRaw<ShardRecord[]>`
    SELECT ${SHARD_COLUMNS}
      FROM shard
      JOIN unnest(${keys.map((k) => k.teamId)}::uuid[], ${keys.map((k) => k.key)}::text[])
           AS wanted(team_id, key)
        ON shard.team_id = wanted.team_id AND shard.idempotency_key = wanted.key`;
  return new Map(rows.map((row) => [idempotencyKeyOf(row.teamId, row.idempotencyKey!), row]));
}

export function idempotencyKeyOf(teamId: string, key: string): string {
  return `${teamId}/${key}`;
}

/**
 * What the batch statement did: the GPUs it took, and the shards it wrote by id, each with the
 * id of its stored PLACED event (shard_event).
 */
export interface BatchWritten {
  readonly takenUuids: ReadonlySet<string>;
  readonly shards: ReadonlyMap<string, { readonly shard: ShardRecord; readonly eventId: string }>;
}

/**
 * One statement for a whole batch, the conditional reservation and the rows:
 *
 * 1. Each chosen GPU's reserved bytes rise by the sum of the batch's shards on it, only where
 *    the host is still ONLINE (locked FOR KEY SHARE: a cordon, drain, offline sweep or
 *    re-registration locks the host FOR UPDATE first, so it waits for this transaction and then
 *    sees its shards, while a heartbeat's FOR NO KEY UPDATE does not wait) and the GPU keeps reserved ≤ floor(total ×
 *    overcommit); its compute shares (and its isolated ones) rise by theirs where they fit
 *    (`gpu_compute_fits`, the rule of libs/limits computeShareFits). The GPU rows are locked in UUID order first, the order every writer of GPU
 *    rows uses, so concurrent batches and heartbeats queue instead of deadlocking.
 * 2. Only the shards all of whose GPUs were taken are written: the shard (PLACED), its
 *    reservations, its audit event "shard.create" and its stored shard event (what
 *    recordShardEvents would write for the PLACED change, here to save the batch a statement;
 *    ids increase in the batch's order, as recordShardEvents hands them out).
 *
 * A GPU that lacked room for the batch's sum takes nothing, so every shard on it is left out;
 * what those shards' other GPUs took must be given back (`giveBack`) before the transaction
 * commits.
 */
export async function writeBatch(
  tx: RawSql,
  planned: readonly PlannedShard[],
): Promise<BatchWritten> {
  const wanted = wantedPerGpu(planned);
  const hostIds = [...new Set(wanted.map((gpu) => gpu.hostId))].sort();
  const uuids = wanted.map((gpu) => gpu.uuid);
  // GPUs and hosts are named by arrays of their keys, not by joins with the batch's rows: the
  // planner sizes a parameter array exactly and probes the primary keys, where it guesses
  // 100 rows for jsonb_to_recordset and then reads all 8,000 GPUs.
  const rows = await tx.$queryRaw<
    (ShardRecord & { takenUuids: string[] | null; eventId: bigint | null })[]
  >`
    /* prepared:write_batch */
    WITH batch AS (
      SELECT * FROM jsonb_to_recordset(${JSON.stringify(planned.map(batchRowOf))}::jsonb) AS b(
        id uuid, team_id uuid, name text, image text, command text[], env jsonb,
        secret_env jsonb, bytes_per_gpu bigint, gpu_count int, limit_bytes bigint, gpu_model_include text[],
        gpu_model_exclude text[], host_selector jsonb, placement_policy placement_policy,
        host_id text, idempotency_key text, request_fingerprint text, gpu_uuids text[],
        audit_id uuid,
        actor_token_id uuid, actor_role token_role, details jsonb, priority_class text,
        requeue boolean, compute_share_permille int, compute_mode compute_mode,
        elastic boolean, ord int)
    ), wanted AS (
      SELECT * FROM unnest(${uuids}::text[], ${wanted.map((gpu) => gpu.hostId)}::text[],
                           ${wanted.map((gpu) => String(gpu.bytes))}::bigint[],
                           ${wanted.map((gpu) => gpu.permille)}::int[],
                           ${wanted.map((gpu) => gpu.isolated)}::int[])
                    AS w(uuid, host_id, bytes, permille, isolated)
    ), schedulable AS (
      SELECT id FROM host
       WHERE id = ANY(${hostIds}::text[]) AND state = 'ONLINE'
       ORDER BY id FOR KEY SHARE
    ), locked AS (
      SELECT uuid FROM gpu WHERE uuid = ANY(${uuids}::text[]) ORDER BY uuid FOR UPDATE
    ), taken AS (
      UPDATE gpu SET reserved_bytes = gpu.reserved_bytes + wanted.bytes,
                     guaranteed_compute_permille = gpu.guaranteed_compute_permille + wanted.permille,
                     isolated_compute_permille = gpu.isolated_compute_permille + wanted.isolated
        FROM wanted
       WHERE gpu.uuid = wanted.uuid
         AND gpu.uuid = ANY(${uuids}::text[])
         AND gpu.uuid IN (SELECT uuid FROM locked)
         AND gpu.host_id = wanted.host_id
         AND gpu.host_id IN (SELECT id FROM schedulable)
         AND gpu.missing_since IS NULL
         AND gpu_memory_fits(gpu.total_bytes, gpu.reserved_bytes, gpu.suspended_bytes,
                             gpu.unattributed_bytes, gpu.overcommit_ratio, wanted.bytes)
         AND gpu_compute_fits(gpu.guaranteed_compute_permille, gpu.isolated_compute_permille,
                              gpu.isolated_pool_permille, wanted.permille, wanted.isolated)
      RETURNING gpu.uuid
    ), complete AS (
      SELECT batch.* FROM batch
       WHERE NOT EXISTS (SELECT 1 FROM unnest(batch.gpu_uuids) AS chosen(uuid)
                          WHERE chosen.uuid NOT IN (SELECT uuid FROM taken))
    ), inserted AS (
      INSERT INTO shard (id, team_id, name, image, command, env, secret_env, bytes_per_gpu,
                         gpu_count, limit_bytes_per_gpu, gpu_model_include, gpu_model_exclude,
                         host_selector, placement_policy, state, host_id, idempotency_key,
                         request_fingerprint, updated_at, priority_class, requeue,
                         compute_share_permille, compute_mode, elastic)
      SELECT id, team_id, name, image, command, env, secret_env, bytes_per_gpu, gpu_count,
             limit_bytes,
             gpu_model_include, gpu_model_exclude, host_selector, placement_policy, 'PLACED',
             host_id, idempotency_key, request_fingerprint, now(), priority_class, requeue,
             compute_share_permille, compute_mode, elastic
        FROM complete
      RETURNING *
    ), reservations AS (
      INSERT INTO shard_gpu (shard_id, gpu_uuid, reserved_bytes, compute_share_permille,
                             reserved_at)
      SELECT complete.id, chosen.uuid, complete.limit_bytes, complete.compute_share_permille,
             now()
        FROM complete CROSS JOIN LATERAL unnest(complete.gpu_uuids) AS chosen(uuid)
    ), events AS (
      INSERT INTO shard_event (at, shard_id, team_id, kind, previous_state, state, details)
      SELECT inserted.created_at, inserted.id, inserted.team_id, 'STATE', NULL, 'PLACED',
             '{}'::jsonb
        FROM inserted JOIN complete ON complete.id = inserted.id
       ORDER BY complete.ord
      RETURNING id, shard_id
    ), audit AS (
      INSERT INTO audit_event (id, actor_token_id, actor_role, team_id, action, target_type,
                               target_id, details)
      SELECT audit_id, actor_token_id, actor_role, team_id, 'shard.create', 'Shard', id::text,
             details
        FROM complete
    )
    SELECT (SELECT array_agg(uuid) FROM taken) AS "takenUuids", events.id AS "eventId",
           ${SHARD_COLUMNS}
      FROM (SELECT 1) AS one LEFT JOIN inserted AS shard ON true
      LEFT JOIN events ON events.shard_id = shard.id`;
  const shards = new Map<string, { shard: ShardRecord; eventId: string }>();
  for (const { takenUuids: _taken, eventId, ...shard } of rows) {
    if (shard.id !== null) shards.set(shard.id, { shard, eventId: String(eventId) });
  }
  return { takenUuids: new Set(rows[0]?.takenUuids ?? []), shards };
}

/** What one shard's request adds to the compute of each of its GPUs. */
export function computeAddedBy(request: ShardRequest): { permille: number; isolated: number } {
  const permille = request.compute.sharePermille;
  return { permille, isolated: request.compute.mode === 'ISOLATED' ? permille : 0 };
}

/** What a batch takes on one GPU (or gives back): bytes, compute shares, isolated ones. */
export interface GpuTake {
  bytes: bigint;
  permille: number;
  isolated: number;
}

/**
 * What the batch adds to each GPU (the sum of its shards' caps and compute shares there), in
 * UUID order.
 */
function wantedPerGpu(
  planned: readonly PlannedShard[],
): ({ uuid: string; hostId: string } & GpuTake)[] {
  const wanted = new Map<string, { uuid: string; hostId: string } & GpuTake>();
  for (const { placed, request } of planned) {
    const { permille, isolated } = computeAddedBy(request);
    for (const uuid of placed.gpuUuids) {
      const gpu = wanted.get(uuid);
      const cap = BigInt(placed.reservedBytesPerGpu);
      if (gpu === undefined)
        wanted.set(uuid, { uuid, hostId: placed.hostId, bytes: cap, permille, isolated });
      else {
        gpu.bytes += cap;
        gpu.permille += permille;
        gpu.isolated += isolated;
      }
    }
  }
  return [...wanted.values()].sort((a, b) => (a.uuid < b.uuid ? -1 : 1));
}

/** Lowers GPUs' reserved bytes and compute again: what left-out shards of a batch took on them. */
export async function giveBack(tx: RawSql, taken: ReadonlyMap<string, GpuTake>): Promise<void> {
  if (taken.size === 0) return;
  const uuids = [...taken.keys()].sort();
  const back = uuids.map((uuid) => taken.get(uuid)!);
  await tx.$executeRaw`
    UPDATE gpu SET reserved_bytes = gpu.reserved_bytes - back.bytes,
                   guaranteed_compute_permille = gpu.guaranteed_compute_permille - back.permille,
                   isolated_compute_permille = gpu.isolated_compute_permille - back.isolated
      FROM unnest(${uuids}::text[], ${back.map((b) => b.bytes)}::bigint[],
                  ${back.map((b) => b.permille)}::int[], ${back.map((b) => b.isolated)}::int[])
           AS back(uuid, bytes, permille, isolated)
     WHERE gpu.uuid = back.uuid`;
}

/**
 * A planned shard as a row of the batch's JSON (sizes as strings: they may pass 2^31); `ord`,
 * its place in the batch, orders the shard events.
 */
function batchRowOf(
  { shardId, auditId, caller, teamId, request, placed }: PlannedShard,
  ord: number,
) {
  const limit = String(placed.reservedBytesPerGpu);
  return {
    ord,
    id: shardId,
    team_id: teamId,
    name: request.name,
    image: request.image,
    command: request.command,
    env: request.env,
    secret_env: request.secretEnv,
    bytes_per_gpu: String(request.bytesPerGpu),
    gpu_count: request.gpuCount,
    limit_bytes: limit,
    gpu_model_include: request.gpuModel.include,
    gpu_model_exclude: request.gpuModel.exclude,
    host_selector: request.hostSelector,
    placement_policy: request.policy,
    host_id: placed.hostId,
    idempotency_key: request.idempotencyKey,
    request_fingerprint: request.idempotencyKey === null ? null : requestFingerprint(request),
    gpu_uuids: placed.gpuUuids,
    audit_id: auditId,
    actor_token_id: caller.tokenId,
    actor_role: caller.role,
    priority_class: request.priorityClass,
    requeue: request.requeue,
    compute_share_permille: request.compute.sharePermille,
    compute_mode: request.compute.mode,
    elastic: request.elastic,
    details: {
      name: request.name,
      image: request.image,
      hostId: placed.hostId,
      gpuUuids: placed.gpuUuids,
      bytesPerGpu: String(request.bytesPerGpu),
      limitBytesPerGpu: limit,
      gpuCount: request.gpuCount,
      idempotencyKey: request.idempotencyKey,
      ...computeDetails(request),
      ...(request.elastic ? { elastic: true } : {}),
    },
  };
}

/** The compute share in an audit event's details, when one was asked. */
function computeDetails(request: ShardRequest): Record<string, unknown> {
  return request.compute.sharePermille === 0 && request.compute.mode === 'GUARANTEED'
    ? {}
    : { computeSharePermille: request.compute.sharePermille, computeMode: request.compute.mode };
}

/** A shard that fits nowhere now, written PENDING (no host, no reservation) with its audit event. */
export async function writePending(
  tx: RawSql,
  shard: {
    shardId: string;
    auditId: string;
    caller: Caller;
    teamId: string;
    request: ShardRequest;
  },
  reason: string,
): Promise<ShardRecord> {
  const { shardId, auditId, caller, teamId, request } = shard;
  const rows = await tx.$queryRaw<ShardRecord[]>`
    INSERT INTO shard (id, team_id, name, image, command, env, secret_env, bytes_per_gpu,
                       gpu_count, limit_bytes_per_gpu, gpu_model_include, gpu_model_exclude, host_selector,
                       placement_policy, state, idempotency_key, request_fingerprint,
                       updated_at, priority_class, queued_at, expires_at, requeue,
                       compute_share_permille, compute_mode, elastic)
    VALUES (${shardId}::uuid, ${teamId}::uuid, ${request.name}, ${request.image},
            ${request.command}::text[], ${JSON.stringify(request.env)}::jsonb,
            ${JSON.stringify(request.secretEnv)}::jsonb,
            ${BigInt(request.bytesPerGpu)}, ${request.gpuCount}, ${BigInt(request.bytesPerGpu)},
            ${request.gpuModel.include}::text[], ${request.gpuModel.exclude}::text[],
            ${JSON.stringify(request.hostSelector)}::jsonb,
            ${request.policy}::placement_policy, 'PENDING', ${request.idempotencyKey},
            ${request.idempotencyKey === null ? null : requestFingerprint(request)}, now(),
            ${request.priorityClass}, now(),
            CASE WHEN ${request.maxWaitSeconds}::int IS NULL THEN NULL
                 ELSE now() + make_interval(secs => ${request.maxWaitSeconds}::int) END,
            ${request.requeue}, ${request.compute.sharePermille}::int,
            ${request.compute.mode}::compute_mode, ${request.elastic})
    RETURNING ${SHARD_COLUMNS}`;
  await tx.$executeRaw`
    INSERT INTO audit_event (id, actor_token_id, actor_role, team_id, action, target_type,
                             target_id, details)
    VALUES (${auditId}::uuid, ${caller.tokenId}::uuid, ${caller.role}::token_role,
            ${teamId}::uuid, 'shard.create', 'Shard', ${shardId},
            ${JSON.stringify({
              name: request.name,
              image: request.image,
              state: 'PENDING',
              reason,
              bytesPerGpu: String(request.bytesPerGpu),
              gpuCount: request.gpuCount,
              priorityClass: request.priorityClass,
              maxWaitSeconds: request.maxWaitSeconds,
              idempotencyKey: request.idempotencyKey,
              ...computeDetails(request),
              ...(request.elastic ? { elastic: true } : {}),
            })}::jsonb)`;
  return rows[0]!;
}

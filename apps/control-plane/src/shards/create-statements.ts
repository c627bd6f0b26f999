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
 * What the batch statement did: the shards it wrote by id, each with the id of its stored
 * PLACED event (shard_event), and what it found on the batch's GPUs.
 */
export interface BatchWritten {
  readonly shards: ReadonlyMap<string, { readonly shard: ShardRecord; readonly eventId: string }>;
  /**
   * The counts of each GPU of the batch as the statement found them under its row lock, before
   * it added anything: what every transaction that had committed on the GPU left there, plus
   * what this transaction's earlier statements added. GPUs gone or missing are not listed.
   */
  readonly gpus: readonly LockedGpu[];
  /**
   * Hosts of the batch on which nothing could be taken whatever the room: no longer ONLINE,
   * or a chosen GPU missing or moved. Their rows must be read again before a call is placed
   * there anew.
   */
  readonly unschedulableHostIds: readonly string[];
}

/** A GPU's counts as the batch statement found them under its row lock. */
export interface LockedGpu {
  readonly uuid: string;
  readonly reservedBytes: number;
  readonly guaranteedComputePermille: number;
  readonly isolatedComputePermille: number;
  readonly suspendedBytes: number;
  readonly unattributedBytes: number;
}

/**
 * One statement for a whole batch, the conditional reservation and the rows:
 *
 * 1. The batch's hosts are locked FOR KEY SHARE where still ONLINE (a cordon, drain, offline
 *    sweep or re-registration locks the host FOR UPDATE first, so it waits for this transaction
 *    and then sees its shards, while a heartbeat's FOR NO KEY UPDATE does not wait) and its GPUs
 *    FOR UPDATE, in UUID order, the order every writer of GPU rows uses, so concurrent batches
 *    and heartbeats queue instead of deadlocking. The locked rows are the latest committed
 *    ones (READ COMMITTED: a row another batch changed meanwhile is read as that batch left it).
 * 2. On each GPU the batch's shards there, in batch order, take the longest prefix that still
 *    fits at that moment: their sum keeps reserved ≤ floor(total × overcommit) and within the
 *    memory no shard's process holds (`gpu_memory_fits`), and the compute shares (and isolated
 *    ones) within theirs (`gpu_compute_fits`, libs/limits computeShareFits). Both rules only
 *    grow stricter as more is added, so the shards that fit form a prefix, found by a running
 *    sum. Another control plane's batch that filled part of the room leaves this one the rest,
 *    instead of sending the whole batch round again (issue #34).
 * 3. A shard is written when it is in the prefix of every one of its GPUs: the shard (PLACED),
 *    its reservations, its audit event "shard.create" and its stored shard event (what
 *    recordShardEvents would write for the PLACED change, here to save the batch a statement;
 *    ids increase in the batch's order, as recordShardEvents hands them out). Each GPU's counts
 *    rise by what the written shards on it add, no more: a subset of a prefix that fits fits
 *    (the rules are monotonic), and a multi-GPU shard left out on one GPU takes nothing on the
 *    others, so nothing has to be given back.
 *
 * The shards left out go round again (writePlanned), placed on what `gpus` says is there now.
 */
export async function writeBatch(
  tx: RawSql,
  planned: readonly PlannedShard[],
): Promise<BatchWritten> {
  const wanted = wantedPerShardGpu(planned);
  const hostIds = [...new Set(wanted.hostIds)].sort();
  const uuids = [...new Set(wanted.uuids)].sort();
  // GPUs and hosts are named by arrays of their keys, not by joins with the batch's rows: the
  // planner sizes a parameter array exactly and probes the primary keys, where it guesses
  // 100 rows for jsonb_to_recordset and then reads all 8,000 GPUs.
  const rows = await tx.$queryRaw<
    (ShardRecord & {
      eventId: bigint | null;
      lockedGpus: [string, number, number, number, number, number][] | null;
      unschedulable: string[] | null;
    })[]
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
      SELECT * FROM unnest(${wanted.ords}::int[], ${wanted.uuids}::text[],
                           ${wanted.hostIds}::text[], ${wanted.bytes}::bigint[],
                           ${wanted.permille}::int[], ${wanted.isolated}::int[])
                    AS w(ord, uuid, host_id, bytes, permille, isolated)
    ), schedulable AS (
      SELECT id FROM host
       WHERE id = ANY(${hostIds}::text[]) AND state = 'ONLINE'
       ORDER BY id FOR KEY SHARE
    ), locked AS (
      SELECT uuid, host_id, missing_since, total_bytes, reserved_bytes, suspended_bytes,
             unattributed_bytes, overcommit_ratio, guaranteed_compute_permille,
             isolated_compute_permille, isolated_pool_permille
        FROM gpu WHERE uuid = ANY(${uuids}::text[]) ORDER BY uuid FOR UPDATE
    ), running AS (
      SELECT ord, uuid, host_id, sum(bytes) OVER upto AS bytes,
             sum(permille) OVER upto AS permille, sum(isolated) OVER upto AS isolated
        FROM wanted WINDOW upto AS (PARTITION BY uuid ORDER BY ord)
    ), fitting AS (
      SELECT running.ord, running.uuid FROM running JOIN locked
          ON locked.uuid = running.uuid AND locked.host_id = running.host_id
       WHERE locked.missing_since IS NULL
         AND locked.host_id IN (SELECT id FROM schedulable)
         AND gpu_memory_fits(locked.total_bytes, locked.reserved_bytes, locked.suspended_bytes,
                             locked.unattributed_bytes, locked.overcommit_ratio,
                             running.bytes::bigint)
         AND gpu_compute_fits(locked.guaranteed_compute_permille,
                              locked.isolated_compute_permille, locked.isolated_pool_permille,
                              running.permille::int, running.isolated::int)
    ), complete AS (
      SELECT batch.* FROM batch
       WHERE NOT EXISTS (SELECT 1 FROM wanted
                          WHERE wanted.ord = batch.ord
                            AND NOT EXISTS (SELECT 1 FROM fitting
                                             WHERE fitting.ord = wanted.ord
                                               AND fitting.uuid = wanted.uuid))
    ), added AS (
      SELECT uuid, sum(bytes)::bigint AS bytes, sum(permille)::int AS permille,
             sum(isolated)::int AS isolated
        FROM wanted WHERE ord IN (SELECT ord FROM complete) GROUP BY uuid
    ), taken AS (
      UPDATE gpu SET reserved_bytes = gpu.reserved_bytes + added.bytes,
                     guaranteed_compute_permille = gpu.guaranteed_compute_permille + added.permille,
                     isolated_compute_permille = gpu.isolated_compute_permille + added.isolated
        FROM added
       WHERE gpu.uuid = added.uuid AND gpu.uuid = ANY(${uuids}::text[])
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
    ), found AS (
      -- Once per answer, not on each of its rows.
      SELECT (SELECT json_agg(json_build_array(uuid, reserved_bytes, guaranteed_compute_permille,
                                               isolated_compute_permille, suspended_bytes,
                                               unattributed_bytes))
                FROM locked WHERE missing_since IS NULL) AS locked_gpus,
             (SELECT array_agg(DISTINCT wanted.host_id) FROM wanted
               WHERE wanted.host_id NOT IN (SELECT id FROM schedulable)
                  OR NOT EXISTS (SELECT 1 FROM locked
                                  WHERE locked.uuid = wanted.uuid
                                    AND locked.host_id = wanted.host_id
                                    AND locked.missing_since IS NULL)) AS unschedulable
    )
    SELECT CASE WHEN row_number() OVER () = 1 THEN found.locked_gpus END AS "lockedGpus",
           CASE WHEN row_number() OVER () = 1 THEN found.unschedulable END AS "unschedulable",
           events.id AS "eventId", ${SHARD_COLUMNS}
      FROM found LEFT JOIN inserted AS shard ON true
      LEFT JOIN events ON events.shard_id = shard.id`;
  const shards = new Map<string, { shard: ShardRecord; eventId: string }>();
  let gpus: LockedGpu[] = [];
  let unschedulableHostIds: string[] = [];
  for (const { eventId, lockedGpus, unschedulable, ...shard } of rows) {
    if (lockedGpus !== null) gpus = lockedGpus.map(lockedGpuOf);
    if (unschedulable !== null) unschedulableHostIds = unschedulable;
    if (shard.id !== null) shards.set(shard.id, { shard, eventId: String(eventId) });
  }
  return { shards, gpus, unschedulableHostIds };
}

function lockedGpuOf([
  uuid,
  reservedBytes,
  guaranteedComputePermille,
  isolatedComputePermille,
  suspendedBytes,
  unattributedBytes,
]: [string, number, number, number, number, number]): LockedGpu {
  return {
    uuid,
    reservedBytes,
    guaranteedComputePermille,
    isolatedComputePermille,
    suspendedBytes,
    unattributedBytes,
  };
}

/** What one shard's request adds to the compute of each of its GPUs. */
export function computeAddedBy(request: ShardRequest): { permille: number; isolated: number } {
  const permille = request.compute.sharePermille;
  return { permille, isolated: request.compute.mode === 'ISOLATED' ? permille : 0 };
}

/**
 * One row per shard and GPU, in batch order: what the shard adds to the GPU (its cap, its
 * compute share and the isolated part of it), as parameter arrays of the batch statement.
 */
function wantedPerShardGpu(planned: readonly PlannedShard[]) {
  const wanted = {
    ords: [] as number[],
    uuids: [] as string[],
    hostIds: [] as string[],
    bytes: [] as string[],
    permille: [] as number[],
    isolated: [] as number[],
  };
  planned.forEach(({ placed, request }, ord) => {
    const { permille, isolated } = computeAddedBy(request);
    for (const uuid of placed.gpuUuids) {
      wanted.ords.push(ord);
      wanted.uuids.push(uuid);
      wanted.hostIds.push(placed.hostId);
      wanted.bytes.push(String(placed.reservedBytesPerGpu));
      wanted.permille.push(permille);
      wanted.isolated.push(isolated);
    }
  });
  return wanted;
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

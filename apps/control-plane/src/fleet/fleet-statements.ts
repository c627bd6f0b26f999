import { MAX_SHARDS_PER_HOST } from '@gpushards/protocol';
import type { HostState, RawSql, ShardState } from '../database/index.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';
import type { HeartbeatRows } from './heartbeat-rows.js';

/**
 * The fleet's SQL: host and GPU rows, what agents report, and the shards of a host. Each
 * statement takes the client or transaction it runs in; the services decide.
 */

/** What an operator's change of a host decides on. */
export interface LockedHost {
  readonly id: string;
  readonly state: HostState;
  readonly cordoned: boolean;
}

/** Marks the hosts that are not OFFLINE alive; returns those it marked (not OFFLINE, known). */
export async function touchLiveHosts(
  sql: RawSql,
  hostIds: readonly string[],
  now: Date,
): Promise<Set<string>> {
  // In id order, so that two batches touching the same hosts lock them in one order.
  const sorted = [...new Set(hostIds)].sort();
  // Rows locked in id order (LockRows over the sort), as any other multi-row locker must.
  // FOR NO KEY UPDATE, the lock the UPDATE itself takes: it waits for a state change (those
  // lock FOR UPDATE) but not for a createShard batch, which holds its hosts FOR KEY SHARE.
  const alive = await sql.$queryRaw<{ id: string }[]>`
    WITH locked AS MATERIALIZED (
      SELECT id FROM host WHERE id = ANY(${sorted}::text[]) AND state <> 'OFFLINE'
       ORDER BY id FOR NO KEY UPDATE)
    UPDATE host SET last_heartbeat_at = ${now}
      FROM locked
     WHERE host.id = locked.id AND host.state <> 'OFFLINE'
    RETURNING host.id`;
  return new Set(alive.map((row) => row.id));
}

/**
 * Each GPU's used bytes and memory of no shard (the host fence's unattributed bytes) as its
 * host reports them. Only GPUs with a value that changed are locked (in uuid order, as every
 * multi-row locker of GPU rows) and written: an unchanged GPU costs no row lock and no row
 * version. A GPU row that another transaction holds (a createShard batch or a release
 * reserving on it) is skipped, not waited for, where only its used bytes changed: they are a
 * sample for display and metrics, which placement does not read, and the host's next
 * heartbeat writes them. Placement does count unattributed bytes (gpu_fits), so a GPU skipped
 * with new unattributed bytes is written by a second statement that waits for the row, as the
 * fence's own statement did before the two were one.
 */
export async function writeGpuReports(sql: RawSql, rows: HeartbeatRows): Promise<void> {
  if (rows.gpuUuids.length === 0) return;
  // -1: NOT_REPORTED (heartbeat-rows.ts), a field the heartbeat did not carry.
  const skipped = await sql.$queryRaw<{ ord: number }[]>`
    WITH reported AS (
           SELECT * FROM unnest(${rows.gpuHostIds}::text[], ${rows.gpuUuids}::text[],
                                ${rows.gpuUsed}::bigint[], ${rows.gpuUnattributed}::bigint[])
                    WITH ORDINALITY AS reported(host_id, uuid, used, unattributed, ord)),
         changed AS MATERIALIZED (
           SELECT gpu.uuid, reported.ord,
                  gpu.unattributed_bytes <> coalesce(nullif(reported.unattributed, -1),
                                                     gpu.unattributed_bytes) AS unattributed_changed
             FROM reported JOIN gpu ON gpu.uuid = reported.uuid AND gpu.host_id = reported.host_id
            WHERE (gpu.used_bytes, gpu.unattributed_bytes)
                  <> (reported.used, coalesce(nullif(reported.unattributed, -1),
                                              gpu.unattributed_bytes))),
         locked AS MATERIALIZED (
           SELECT uuid FROM gpu WHERE uuid IN (SELECT uuid FROM changed)
            ORDER BY uuid FOR NO KEY UPDATE SKIP LOCKED),
         written AS (
           UPDATE gpu SET used_bytes = reported.used,
                          unattributed_bytes = coalesce(nullif(reported.unattributed, -1),
                                                        gpu.unattributed_bytes)
             FROM reported, locked
            WHERE gpu.uuid = reported.uuid AND gpu.host_id = reported.host_id
              AND locked.uuid = gpu.uuid
              AND (gpu.used_bytes, gpu.unattributed_bytes)
                  <> (reported.used, coalesce(nullif(reported.unattributed, -1),
                                              gpu.unattributed_bytes))
           RETURNING gpu.uuid)
    SELECT ord::int AS ord FROM changed
     WHERE unattributed_changed AND uuid NOT IN (SELECT uuid FROM written)`;
  if (skipped.length === 0) return;
  const waited = skipped.map(({ ord }) => ord - 1);
  await sql.$executeRaw`
    WITH locked AS MATERIALIZED (
      SELECT uuid FROM gpu WHERE uuid = ANY(${waited.map((row) => rows.gpuUuids[row]!)}::text[])
       ORDER BY uuid FOR NO KEY UPDATE)
    UPDATE gpu SET unattributed_bytes = reported.unattributed
      FROM unnest(${waited.map((row) => rows.gpuHostIds[row]!)}::text[],
                  ${waited.map((row) => rows.gpuUuids[row]!)}::text[],
                  ${waited.map((row) => rows.gpuUnattributed[row]!)}::bigint[])
           AS reported(host_id, uuid, unattributed),
           locked
     WHERE gpu.uuid = reported.uuid AND gpu.host_id = reported.host_id
       AND locked.uuid = gpu.uuid
       AND gpu.unattributed_bytes <> reported.unattributed`;
}

/**
 * Each live reservation's latest reading, for shards of the reporting host only: used bytes,
 * and the host fence's real bytes and the compute ledger's busy ratio and last kernel launch
 * where the heartbeat carried them (a field not reported keeps its value). One statement for
 * the batch; a reservation whose reading did not change is not written (no row version).
 */
export async function writeShardReadings(sql: RawSql, rows: HeartbeatRows): Promise<void> {
  if (rows.readingShardIds.length === 0) return;
  // -1: NOT_REPORTED (heartbeat-rows.ts), a field the heartbeat did not carry.
  await sql.$executeRaw`
    WITH reported AS (
      SELECT host_id, shard_id, gpu_uuid, nullif(used, -1) AS used,
             nullif(real, -1) AS real, nullif(busy, -1) AS busy,
             timestamptz 'epoch' + nullif(last_kernel_ms, -1) * interval '1 millisecond'
               AS last_kernel
        FROM unnest(${rows.readingHostIds}::text[], ${rows.readingShardIds}::uuid[],
                    ${rows.readingGpuUuids}::text[], ${rows.readingUsed}::bigint[],
                    ${rows.readingReal}::bigint[], ${rows.readingBusy}::float8[],
                    ${rows.readingLastKernelMs}::bigint[])
             AS reported(host_id, shard_id, gpu_uuid, used, real, busy, last_kernel_ms))
    UPDATE shard_gpu SET used_bytes = coalesce(reported.used, shard_gpu.used_bytes),
                         real_bytes = coalesce(reported.real, shard_gpu.real_bytes),
                         busy_ratio = coalesce(reported.busy, shard_gpu.busy_ratio),
                         last_kernel_at = coalesce(reported.last_kernel, shard_gpu.last_kernel_at)
      FROM reported, shard
     WHERE shard_gpu.shard_id = reported.shard_id AND shard_gpu.gpu_uuid = reported.gpu_uuid
       AND shard_gpu.released_at IS NULL
       AND shard.id = reported.shard_id AND shard.host_id = reported.host_id
       AND (shard_gpu.used_bytes, shard_gpu.real_bytes, shard_gpu.busy_ratio,
            shard_gpu.last_kernel_at)
           IS DISTINCT FROM (coalesce(reported.used, shard_gpu.used_bytes),
                             coalesce(reported.real, shard_gpu.real_bytes),
                             coalesce(reported.busy, shard_gpu.busy_ratio),
                             coalesce(reported.last_kernel, shard_gpu.last_kernel_at))`;
}

/**
 * One usage sample per shard and GPU at its heartbeat's time (a repeated heartbeat writes
 * none); returns the reporting host of each new sample.
 */
export async function insertUsageSamples(sql: RawSql, rows: HeartbeatRows): Promise<string[]> {
  if (rows.sampleShardIds.length === 0) return [];
  const written = await sql.$queryRaw<{ hostId: string }[]>`
    WITH written AS (
      INSERT INTO usage_sample (shard_id, gpu_uuid, at, used_bytes)
      SELECT reported.shard_id, reported.gpu_uuid, reported.at, reported.used
        FROM unnest(${rows.sampleHostIds}::text[], ${rows.sampleShardIds}::uuid[],
                    ${rows.sampleGpuUuids}::text[], ${rows.sampleAt}::timestamptz[],
                    ${rows.sampleUsed}::bigint[])
             AS reported(host_id, shard_id, gpu_uuid, at, used)
        JOIN shard ON shard.id = reported.shard_id AND shard.host_id = reported.host_id
      ON CONFLICT DO NOTHING
      RETURNING shard_id)
    SELECT shard.host_id AS "hostId" FROM written JOIN shard ON shard.id = written.shard_id`;
  return written.map((row) => row.hostId);
}

/** A state event that changes no state: its time and container id. */
export async function noteShardEvent(
  sql: RawSql,
  shardId: string,
  at: Date,
  containerId: string | undefined,
): Promise<void> {
  await sql.$executeRaw`
    UPDATE shard SET last_event_at = ${at},
                     container_id = coalesce(${containerId ?? null}, container_id)
     WHERE id = ${shardId}::uuid`;
}

/** The host's state; undefined for a host that never registered. */
export async function hostStateOf(sql: RawSql, hostId: string): Promise<HostState | undefined> {
  const [row] = await sql.$queryRaw<{ state: HostState }[]>`
    SELECT state::text AS state FROM host WHERE id = ${hostId}`;
  return row?.state;
}

/** The host's shards in `states`, by id, not locked (lockHostShards to decide a write). */
export function readHostShards(
  sql: RawSql,
  hostId: string,
  states: readonly ShardState[],
): Promise<ShardRecord[]> {
  return sql.$queryRaw<ShardRecord[]>`
    SELECT ${SHARD_COLUMNS} FROM shard
     WHERE host_id = ${hostId} AND state = ANY(${[...states]}::shard_state[])
     ORDER BY id`;
}

/** The host's shards in `states`, row-locked by id as ShardLifecycle.lock locks one. */
export function lockHostShards(
  tx: RawSql,
  hostId: string,
  states: readonly ShardState[],
): Promise<ShardRecord[]> {
  return tx.$queryRaw<ShardRecord[]>`
    SELECT ${SHARD_COLUMNS} FROM shard
     WHERE host_id = ${hostId} AND state = ANY(${[...states]}::shard_state[])
     ORDER BY id FOR NO KEY UPDATE`;
}

/** The host's shards in `states` with the GPUs they hold, oldest first, bounded by the protocol. */
export function runnableShards(
  sql: RawSql,
  hostId: string,
  states: readonly ShardState[],
): Promise<(ShardRecord & { gpuUuids: string[] | null })[]> {
  return sql.$queryRaw<(ShardRecord & { gpuUuids: string[] | null })[]>`
    SELECT ${SHARD_COLUMNS},
           (SELECT array_agg(held.gpu_uuid ORDER BY gpu.index, held.gpu_uuid)
              FROM shard_gpu held JOIN gpu ON gpu.uuid = held.gpu_uuid
             WHERE held.shard_id = shard.id AND held.released_at IS NULL) AS "gpuUuids"
      FROM shard
     WHERE host_id = ${hostId} AND state = ANY(${[...states]}::shard_state[])
     ORDER BY created_at, id
     LIMIT ${MAX_SHARDS_PER_HOST}`;
}

/** A host's shard with the GPUs it holds (null: none), ordered as the host's reservation lists them. */
export type ShardWithGpus = ShardRecord & { gpuUuids: string[] | null };

/** What a reconcile reads of its host (readHostForReconcile). */
export interface HostReconcileView {
  readonly hostState: HostState;
  /** The host's shards in the live states asked, with their GPUs, oldest first. */
  readonly shards: ShardWithGpus[];
  /** Ids of the host's shards in the stopped states asked, newest first, bounded by the protocol. */
  readonly stoppedIds: string[];
}

/**
 * Everything a reconcile reads of a host, in one statement: its state, its shards in
 * `liveStates` with their GPUs (what runnableShards and readHostShards read) and the ids of its
 * newest shards in `stoppedStates` (newestShardIds). Undefined for a host that never registered.
 */
export async function readHostForReconcile(
  sql: RawSql,
  hostId: string,
  liveStates: readonly ShardState[],
  stoppedStates: readonly ShardState[],
): Promise<HostReconcileView | undefined> {
  const rows = await sql.$queryRaw<
    (Omit<ShardWithGpus, 'id'> & {
      id: string | null;
      hostState: HostState;
      stoppedIds: string[];
    })[]
  >`
    SELECT host.state::text AS "hostState",
           ARRAY(SELECT stopped.id::text FROM shard AS stopped
                  WHERE stopped.host_id = ${hostId}
                    AND stopped.state = ANY(${[...stoppedStates]}::shard_state[])
                  ORDER BY stopped.updated_at DESC, stopped.id
                  LIMIT ${MAX_SHARDS_PER_HOST}) AS "stoppedIds",
           live.*
      FROM host
      LEFT JOIN LATERAL (
        SELECT ${SHARD_COLUMNS},
               (SELECT array_agg(held.gpu_uuid ORDER BY gpu.index, held.gpu_uuid)
                  FROM shard_gpu held JOIN gpu ON gpu.uuid = held.gpu_uuid
                 WHERE held.shard_id = shard.id AND held.released_at IS NULL) AS "gpuUuids"
          FROM shard
         WHERE shard.host_id = ${hostId} AND shard.state = ANY(${[...liveStates]}::shard_state[])
      ) AS live ON true
     WHERE host.id = ${hostId}
     ORDER BY live."createdAt", live.id`;
  const first = rows[0];
  if (first === undefined) return undefined;
  const shards: ShardWithGpus[] = [];
  for (const { hostState: _state, stoppedIds: _stopped, id, ...shard } of rows) {
    if (id !== null) shards.push({ id, ...shard });
  }
  return { hostState: first.hostState, shards, stoppedIds: first.stoppedIds };
}

/** Ids of the host's shards in `states`, newest first, bounded by the protocol. */
export async function newestShardIds(
  sql: RawSql,
  hostId: string,
  states: readonly ShardState[],
): Promise<string[]> {
  const rows = await sql.$queryRaw<{ id: string }[]>`
    SELECT id::text AS id FROM shard
     WHERE host_id = ${hostId} AND state = ANY(${[...states]}::shard_state[])
     ORDER BY updated_at DESC, id
     LIMIT ${MAX_SHARDS_PER_HOST}`;
  return rows.map((row) => row.id);
}

/** Which of the hosts have a shard in one of the states (the index on host and state). */
export async function hostsWithShardsIn(
  sql: RawSql,
  hostIds: readonly string[],
  states: readonly ShardState[],
): Promise<Set<string>> {
  const rows = await sql.$queryRaw<{ hostId: string }[]>`
    SELECT DISTINCT host_id AS "hostId" FROM shard
     WHERE host_id = ANY(${[...hostIds]}::text[]) AND state = ANY(${[...states]}::shard_state[])`;
  return new Set(rows.map((row) => row.hostId));
}

/** An OFFLINE host back ONLINE (CORDONED if cordoned); undefined when it was not OFFLINE. */
export async function reviveHost(
  tx: RawSql,
  hostId: string,
  now: Date,
): Promise<HostState | undefined> {
  const rows = await tx.$queryRaw<{ state: HostState }[]>`
    UPDATE host SET state = CASE WHEN cordoned THEN 'CORDONED'::host_state ELSE 'ONLINE'::host_state END,
                    last_heartbeat_at = ${now}, updated_at = now()
     WHERE id = ${hostId} AND state = 'OFFLINE'
    RETURNING state::text AS state`;
  return rows[0]?.state;
}

/**
 * The host row, locked for an operator's change. FOR UPDATE, as every change of a host's state
 * locks it: createShard's batch holds its hosts only FOR KEY SHARE, which this waits for.
 */
export async function lockHost(tx: RawSql, hostId: string): Promise<LockedHost | undefined> {
  const rows = await tx.$queryRaw<LockedHost[]>`
    SELECT id, state::text AS state, cordoned FROM host WHERE id = ${hostId} FOR UPDATE`;
  return rows[0];
}

export async function setHostState(
  tx: RawSql,
  hostId: string,
  cordoned: boolean,
  state: HostState,
): Promise<void> {
  await tx.$executeRaw`
    UPDATE host SET cordoned = ${cordoned}, state = ${state}::host_state, updated_at = now()
     WHERE id = ${hostId}`;
}

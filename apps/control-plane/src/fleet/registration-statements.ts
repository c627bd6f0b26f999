import type { RegisterRequest } from '@gpushards/protocol';
import type { HostState, RawSql, ShardState } from '../database/index.js';

/**
 * The SQL of a batch of agent registrations (HostRegistrationService): each statement writes
 * every host of the batch at once, in the lock order every multi-row locker keeps (hosts by
 * id, GPUs by uuid).
 */

/**
 * A registered host as written: its state, whether it has LOST shards to settle, and whether
 * its shards in host RAM hold more than its (new) suspend budget (SuspendBudgetCheck).
 */
export interface RegisteredHost {
  readonly state: HostState;
  readonly hasLost: boolean;
  readonly overBudget: boolean;
}

/**
 * Locks the hosts of the batch that exist (FOR UPDATE, id order, as a change of a host's state
 * does) and returns the state each had: the offline sweep cannot mark one of them while the
 * batch writes it, and a host it marked before is seen OFFLINE here.
 */
export async function lockRegisteringHosts(
  tx: RawSql,
  hostIds: readonly string[],
): Promise<Map<string, HostState>> {
  const rows = await tx.$queryRaw<{ id: string; state: HostState }[]>`
    SELECT id, state::text AS state FROM host
     WHERE id = ANY(${[...hostIds]}::text[]) ORDER BY id FOR UPDATE`;
  return new Map(rows.map((row) => [row.id, row.state]));
}

/**
 * Creates or updates the hosts from their agents' registrations; an OFFLINE host comes back
 * ONLINE (CORDONED if cordoned). Run after lockRegisteringHosts: this statement's snapshot
 * then has every LOST shard of the locked hosts (a sweep that marked one committed before the
 * lock was granted), which `hasLost` reports.
 */
export async function upsertRegisteredHosts(
  tx: RawSql,
  hosts: readonly RegisterRequest['host'][],
  now: Date,
  hostMemoryStates: readonly ShardState[],
): Promise<Map<string, RegisteredHost>> {
  const rows = JSON.stringify(
    [...hosts]
      .sort((a, b) => (a.hostId < b.hostId ? -1 : a.hostId > b.hostId ? 1 : 0))
      .map((host) => ({
        id: host.hostId,
        name: host.name,
        labels: host.labels,
        context_overhead_bytes: String(host.contextOverheadBytes),
        agent_version: host.agentVersion,
        driver_version: host.driverVersion,
        cuda_version: host.cudaVersion,
        simulated: host.simulated,
        suspend_budget_bytes: String(host.suspendBudgetBytes ?? 0),
        suspend_unavailable_reason: host.suspendUnavailableReason ?? null,
      })),
  );
  const written = await tx.$queryRaw<
    { id: string; state: HostState; hasLost: boolean; overBudget: boolean }[]
  >`
    INSERT INTO host (id, name, labels, context_overhead_bytes, agent_version, driver_version,
                      cuda_version, simulated, last_heartbeat_at, updated_at,
                      suspend_budget_bytes, suspend_unavailable_reason)
    SELECT r.id, r.name, r.labels, r.context_overhead_bytes, r.agent_version, r.driver_version,
           r.cuda_version, r.simulated, ${now}, now(), r.suspend_budget_bytes,
           r.suspend_unavailable_reason
      FROM jsonb_to_recordset(${rows}::jsonb)
           AS r(id text, name text, labels jsonb, context_overhead_bytes bigint,
                agent_version text, driver_version text, cuda_version text, simulated boolean,
                suspend_budget_bytes bigint, suspend_unavailable_reason text)
     ORDER BY r.id
    ON CONFLICT (id) DO UPDATE SET
      suspend_budget_bytes = EXCLUDED.suspend_budget_bytes,
      suspend_unavailable_reason = EXCLUDED.suspend_unavailable_reason,
      name = EXCLUDED.name, labels = EXCLUDED.labels,
      context_overhead_bytes = EXCLUDED.context_overhead_bytes,
      agent_version = EXCLUDED.agent_version, driver_version = EXCLUDED.driver_version,
      cuda_version = EXCLUDED.cuda_version, simulated = EXCLUDED.simulated,
      last_heartbeat_at = EXCLUDED.last_heartbeat_at, updated_at = now(),
      state = CASE WHEN host.state <> 'OFFLINE' THEN host.state
                   WHEN host.cordoned THEN 'CORDONED'::host_state
                   ELSE 'ONLINE'::host_state END
    RETURNING host.id, host.state::text AS state,
              EXISTS (SELECT 1 FROM shard
                       WHERE shard.host_id = host.id AND shard.state = 'LOST') AS "hasLost",
              coalesce((SELECT sum(limit_bytes_per_gpu * gpu_count) FROM shard
                         WHERE shard.host_id = host.id
                           AND shard.state = ANY(${[...hostMemoryStates]}::shard_state[])), 0)
                > host.suspend_budget_bytes AS "overBudget"`;
  return new Map(
    written.map((row) => [
      row.id,
      { state: row.state, hasLost: row.hasLost, overBudget: row.overBudget },
    ]),
  );
}

/**
 * Creates or updates the GPUs of the registering hosts, each with its host's isolated
 * partition (HostInfo.isolatedComputePermille; 0 = none), and marks each host's GPUs that its
 * agent no longer lists missing. A GPU whose reservations exceed its new total keeps its old
 * total until they shrink. Returns those GPUs, with their host.
 */
export async function upsertRegisteredGpus(
  tx: RawSql,
  registrations: readonly Pick<RegisterRequest, 'host' | 'gpus'>[],
  now: Date,
): Promise<{ hostId: string; gpuUuid: string }[]> {
  const listed = registrations
    .flatMap(({ host, gpus }) =>
      gpus.map((gpu) => ({ hostId: host.hostId, pool: host.isolatedComputePermille ?? 0, gpu })),
    )
    .sort((a, b) => (a.gpu.uuid < b.gpu.uuid ? -1 : a.gpu.uuid > b.gpu.uuid ? 1 : 0));
  const hostIds = listed.map((row) => row.hostId);
  const uuids = listed.map((row) => row.gpu.uuid);
  let kept: { hostId: string; gpuUuid: string }[] = [];
  if (listed.length > 0) {
    const rows = await tx.$queryRaw<{ uuid: string; hostId: string; totalBytes: bigint }[]>`
      INSERT INTO gpu (uuid, host_id, index, model, total_bytes, used_bytes,
                       isolated_pool_permille, updated_at)
      SELECT reported.uuid, reported.host_id, reported.index, reported.model, reported.total,
             reported.used, reported.pool, now()
        FROM unnest(${uuids}::text[], ${hostIds}::text[],
                    ${listed.map((row) => row.gpu.index)}::int[],
                    ${listed.map((row) => row.gpu.model)}::text[],
                    ${listed.map((row) => BigInt(row.gpu.totalBytes))}::bigint[],
                    ${listed.map((row) => BigInt(row.gpu.usedBytes))}::bigint[],
                    ${listed.map((row) => row.pool)}::int[])
             WITH ORDINALITY AS reported(uuid, host_id, index, model, total, used, pool, ord)
       ORDER BY reported.ord
      ON CONFLICT (uuid) DO UPDATE SET
        host_id = EXCLUDED.host_id, index = EXCLUDED.index, model = EXCLUDED.model,
        used_bytes = EXCLUDED.used_bytes, missing_since = NULL, updated_at = now(),
        isolated_pool_permille = EXCLUDED.isolated_pool_permille,
        total_bytes = CASE
          WHEN gpu.reserved_bytes <= floor(EXCLUDED.total_bytes * gpu.overcommit_ratio)
          THEN EXCLUDED.total_bytes ELSE gpu.total_bytes END
      RETURNING uuid, host_id AS "hostId", total_bytes AS "totalBytes"`;
    const reported = new Map(listed.map((row) => [row.gpu.uuid, BigInt(row.gpu.totalBytes)]));
    kept = rows
      .filter((row) => row.totalBytes !== reported.get(row.uuid))
      .map((row) => ({ hostId: row.hostId, gpuUuid: row.uuid }));
  }
  await tx.$executeRaw`
    UPDATE gpu SET missing_since = ${now}
     WHERE host_id = ANY(${registrations.map(({ host }) => host.hostId)}::text[])
       AND missing_since IS NULL
       AND NOT EXISTS (SELECT 1 FROM unnest(${hostIds}::text[], ${uuids}::text[])
                                       AS listed(host_id, uuid)
                        WHERE listed.host_id = gpu.host_id AND listed.uuid = gpu.uuid)`;
  return kept;
}

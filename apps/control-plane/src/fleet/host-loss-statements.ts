import { HOST_LOSS_STATES } from '@gpushards/limits';
import type { HostState, RawSql } from '../database/index.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';

/**
 * The offline sweep's SQL (HostLivenessService.markSilentHostsOffline): which hosts are
 * silent, and marking many of them at once. Each statement takes the client or transaction it
 * runs in.
 */

/** A host the sweep marked OFFLINE: the state it left, and its last heartbeat. */
export interface OfflineHost {
  readonly id: string;
  readonly previous: HostState;
  readonly lastHeartbeatAt: Date | null;
}

/**
 * Hosts not OFFLINE whose last heartbeat is older than `deadline` (or never came), by id. A
 * sequential scan of the host table: an index on last_heartbeat_at would cost every heartbeat
 * (the hottest write: its UPDATE is HOT only while no index covers the column) to spare a scan
 * per sweep period (bench/README.md, 2026-11-29 third session).
 */
export async function silentHostIds(sql: RawSql, deadline: Date): Promise<string[]> {
  const rows = await sql.$queryRaw<{ id: string }[]>`
    SELECT id FROM host
     WHERE state <> 'OFFLINE' AND (last_heartbeat_at IS NULL OR last_heartbeat_at < ${deadline})
     ORDER BY id`;
  return rows.map((row) => row.id);
}

/**
 * The hosts of `hostIds` still silent past `deadline`, OFFLINE, in one statement; those that
 * are not (any more: a heartbeat came, another control plane marked them) are left as they
 * are. The rows are locked in id order (as touchLiveHosts and every multi-host locker lock
 * them) FOR UPDATE, as every change of a host's state locks it; the silence is checked on
 * the row as locked, so a heartbeat that committed first keeps its host, and one that comes
 * after waits for the commit and finds it OFFLINE.
 */
export async function markHostsOffline(
  tx: RawSql,
  hostIds: readonly string[],
  deadline: Date,
): Promise<OfflineHost[]> {
  const sorted = [...new Set(hostIds)].sort();
  return tx.$queryRaw<OfflineHost[]>`
    WITH locked AS MATERIALIZED (
      SELECT id, state FROM host
       WHERE id = ANY(${sorted}::text[]) AND state <> 'OFFLINE'
         AND (last_heartbeat_at IS NULL OR last_heartbeat_at < ${deadline})
       ORDER BY id FOR UPDATE)
    UPDATE host SET state = 'OFFLINE', updated_at = now()
      FROM locked
     WHERE host.id = locked.id
    RETURNING host.id, locked.state::text AS previous, host.last_heartbeat_at AS "lastHeartbeatAt"`;
}

/**
 * The shards of `hostIds` that a host's loss changes (libs/limits HOST_LOSS_STATES),
 * row-locked in id order as ShardLifecycle.lockMany locks them.
 */
export function lockShardsOfLostHosts(
  tx: RawSql,
  hostIds: readonly string[],
): Promise<ShardRecord[]> {
  return tx.$queryRaw<ShardRecord[]>`
    SELECT ${SHARD_COLUMNS} FROM shard
     WHERE host_id = ANY(${[...hostIds]}::text[])
       AND state = ANY(${[...HOST_LOSS_STATES]}::shard_state[])
     ORDER BY id FOR NO KEY UPDATE`;
}

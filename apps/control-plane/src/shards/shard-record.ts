import { Prisma, type Shard } from '../database/index.js';

/** A shard row as services pass it around (the Prisma model). */
export type ShardRecord = Shard;

/**
 * The shard columns under the model's field names, for raw queries whose result is a
 * ShardRecord: `SELECT ${SHARD_COLUMNS} FROM shard ...` (the table or alias must be `shard`).
 */
export const SHARD_COLUMNS = Prisma.raw(
  [
    'shard.id::text AS "id"',
    'shard.team_id::text AS "teamId"',
    'shard.name',
    'shard.image',
    'shard.command',
    'shard.env',
    'shard.secret_env AS "secretEnv"',
    'shard.bytes_per_gpu AS "bytesPerGpu"',
    'shard.gpu_count AS "gpuCount"',
    'shard.limit_bytes_per_gpu AS "limitBytesPerGpu"',
    'shard.gpu_model_include AS "gpuModelInclude"',
    'shard.gpu_model_exclude AS "gpuModelExclude"',
    'shard.host_selector AS "hostSelector"',
    'shard.placement_policy::text AS "placementPolicy"',
    'shard.state::text AS "state"',
    'shard.host_id AS "hostId"',
    'shard.failure_reason AS "failureReason"',
    'shard.exit_code AS "exitCode"',
    'shard.idempotency_key AS "idempotencyKey"',
    'shard.request_fingerprint AS "requestFingerprint"',
    'shard.container_id AS "containerId"',
    'shard.created_at AS "createdAt"',
    'shard.updated_at AS "updatedAt"',
    'shard.started_at AS "startedAt"',
    'shard.stopped_at AS "stoppedAt"',
    'shard.last_event_at AS "lastEventAt"',
    'shard.version',
    'shard.priority_class AS "priorityClass"',
    'shard.queued_at AS "queuedAt"',
    'shard.expires_at AS "expiresAt"',
    'shard.requeue',
    'shard.stop_intent AS "stopIntent"',
    'shard.reclaim_for::text AS "reclaimFor"',
    'shard.compute_share_permille AS "computeSharePermille"',
    'shard.compute_mode::text AS "computeMode"',
    'shard.idle_since AS "idleSince"',
    'shard.elastic',
    'shard.suspend_cause AS "suspendCause"',
    'shard.resume_wanted_at AS "resumeWantedAt"',
    'shard.memory_moved_bytes AS "memoryMovedBytes"',
    'shard.memory_total_bytes AS "memoryTotalBytes"',
    'shard.memory_move_seconds AS "memoryMoveSeconds"',
    'shard.memory_move_error AS "memoryMoveError"',
  ].join(', '),
);

/** Labels and host selectors are stored as JSON objects of strings. */
export function stringRecord(json: Prisma.JsonValue): Record<string, string> {
  const result: Record<string, string> = {};
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return result;
  for (const [key, value] of Object.entries(json)) {
    if (typeof value === 'string') result[key] = value;
  }
  return result;
}

import { ConflictError } from '../errors/domain-errors.js';
import type { ShardRequest } from './shard-input.js';
import { stringRecord, type ShardRecord } from './shard-record.js';

/**
 * The first shard of an idempotency key, when a retry asks for the same shard; CONFLICT when
 * the key was used for a different one.
 */
export function replayOf(existing: ShardRecord, request: ShardRequest): ShardRecord {
  if (fingerprintOfRecord(existing) !== fingerprintOfRequest(request)) {
    throw new ConflictError(
      `idempotency key "${request.idempotencyKey}" was used for a different shard (${existing.id}); use a new key`,
    );
  }
  return existing;
}

function sortedRecord(record: Readonly<Record<string, string>>): [string, string][] {
  return Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** What a createShard asked for, to tell a retry from a different request under one key. */
function fingerprintOfRequest(request: ShardRequest): string {
  return JSON.stringify([
    request.name,
    request.image,
    request.command,
    sortedRecord(request.env),
    request.bytesPerGpu,
    request.gpuCount,
    request.gpuModel.include,
    request.gpuModel.exclude,
    sortedRecord(request.hostSelector),
    request.policy,
  ]);
}

function fingerprintOfRecord(shard: ShardRecord): string {
  return JSON.stringify([
    shard.name,
    shard.image,
    shard.command,
    sortedRecord(stringRecord(shard.env)),
    Number(shard.bytesPerGpu),
    shard.gpuCount,
    shard.gpuModelInclude,
    shard.gpuModelExclude,
    sortedRecord(stringRecord(shard.hostSelector)),
    shard.placementPolicy,
  ]);
}

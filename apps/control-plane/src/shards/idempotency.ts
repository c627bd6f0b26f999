import { createHash } from 'node:crypto';

import { ConflictError } from '../errors/domain-errors.js';
import type { ShardRequest } from './shard-input.js';
import { stringRecord, type ShardRecord } from './shard-record.js';

/**
 * The first shard of an idempotency key, when a retry asks for the same shard; CONFLICT when
 * the key was used for a different one. A retry is compared with what the first request asked
 * for (stored with the shard as `requestFingerprint`), not with the shard as it is now: a
 * create resent after the shard was resized is still the same request. Shards stored before
 * the fingerprint was are compared with their row.
 */
export function replayOf(existing: ShardRecord, request: ShardRequest): ShardRecord {
  const first = existing.requestFingerprint ?? fingerprintOfRecord(existing);
  if (first !== requestFingerprint(request)) {
    throw new ConflictError(
      `idempotency key "${request.idempotencyKey}" was used for a different shard (${existing.id}); use a new key`,
    );
  }
  return existing;
}

function sortedRecord(record: Readonly<Record<string, string>>): [string, string][] {
  return Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** A fixed-size digest: env values and commands may be long. */
function digest(fields: unknown[]): string {
  return createHash('sha256').update(JSON.stringify(fields)).digest('hex');
}

/**
 * Secret names take part (none: the digest of a request without secrets is unchanged);
 * secret values do not: a digest of them would be stored beside the shard in clear.
 */
function secretNamesOf(names: readonly string[]): unknown[] {
  return names.length === 0 ? [] : [{ secretEnv: [...names].sort() }];
}

/** What a createShard asked for, to tell a retry from a different request under one key. */
export function requestFingerprint(request: ShardRequest): string {
  return digest([
    request.name,
    request.image,
    request.command,
    sortedRecord(request.env),
    ...secretNamesOf(Object.keys(request.secretEnv)),
    request.bytesPerGpu,
    request.gpuCount,
    request.gpuModel.include,
    request.gpuModel.exclude,
    sortedRecord(request.hostSelector),
    request.policy,
    ...computeOf(request.compute.sharePermille, request.compute.mode),
    ...(request.elastic ? [{ elastic: true }] : []),
  ]);
}

/** A compute share takes part when one was asked (none: the digest is as before shares existed). */
function computeOf(sharePermille: number, mode: string): unknown[] {
  return sharePermille === 0 && mode === 'GUARANTEED' ? [] : [{ compute: [sharePermille, mode] }];
}

function fingerprintOfRecord(shard: ShardRecord): string {
  return digest([
    shard.name,
    shard.image,
    shard.command,
    sortedRecord(stringRecord(shard.env)),
    ...secretNamesOf(Object.keys(stringRecord(shard.secretEnv))),
    Number(shard.bytesPerGpu),
    shard.gpuCount,
    shard.gpuModelInclude,
    shard.gpuModelExclude,
    sortedRecord(stringRecord(shard.hostSelector)),
    shard.placementPolicy,
    ...computeOf(shard.computeSharePermille, shard.computeMode),
    ...(shard.elastic ? [{ elastic: true }] : []),
  ]);
}

import { z } from 'zod';

import { PROTOCOL_VERSION } from './version.js';

/**
 * Ids that become NATS subject tokens, Docker label values and folder names: no dots
 * (token separator), no `*` or `>` (wildcards), no slashes (paths), no whitespace.
 */
export const SAFE_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const SAFE_ID_RULE = '1-64 characters of A-Z, a-z, 0-9, "_" and "-"';

function safeIdSchema(what: string) {
  return z.string().regex(SAFE_ID_PATTERN, `${what} must be ${SAFE_ID_RULE}`);
}

export const hostIdSchema = safeIdSchema('a host id');
export const shardIdSchema = safeIdSchema('a shard id');
export const teamIdSchema = safeIdSchema('a team id');

export function isValidHostId(hostId: string): boolean {
  return SAFE_ID_PATTERN.test(hostId);
}

/** Throws when `hostId` cannot be a NATS subject token; for ids that come from configuration. */
export function assertValidHostId(hostId: string): void {
  if (!isValidHostId(hostId)) {
    throw new Error(
      `invalid host id ${JSON.stringify(hostId)}: a host id must be ${SAFE_ID_RULE} ` +
        '(no dots or wildcards: it is a NATS subject token)',
    );
  }
}

/** Byte counts stay below 2^53 so they survive JSON and JavaScript numbers exactly. */
export const bytesSchema = z
  .int({ error: 'byte counts must be whole numbers' })
  .min(0, 'byte counts cannot be negative')
  .max(Number.MAX_SAFE_INTEGER, 'byte counts must be below 2^53 (Number.MAX_SAFE_INTEGER)');

export const positiveBytesSchema = bytesSchema.min(1, 'a memory limit must be at least 1 byte');

export const commandIdSchema = z.uuid('a command id must be a UUID');
export const eventIdSchema = z.uuid('an event id must be a UUID');

/** ISO 8601 with a zone, as `Date.prototype.toISOString()` writes it. */
export const timestampSchema = z.iso.datetime({
  offset: true,
  error: 'timestamps must be ISO 8601 date-times with a zone, e.g. 2024-05-01T12:00:00.000Z',
});

/** NVIDIA writes `GPU-<uuid>` or `MIG-...`; simulated GPUs may use other printable forms. */
export const gpuUuidSchema = z
  .string()
  .regex(/^[\x21-\x7e]{1,128}$/, 'a GPU UUID must be 1-128 printable ASCII characters');

export const containerIdSchema = z
  .string()
  .regex(/^[A-Za-z0-9_.-]{1,128}$/, 'a container id must be 1-128 characters of A-Z a-z 0-9 _ . -');

/** Free text (names, reasons, versions): bounded, no control characters. */
export function textSchema(maxLength: number) {
  return z
    .string()
    .min(1, 'must not be empty')
    .max(maxLength, `must be at most ${maxLength} characters`)
    .regex(/^[^\p{Cc}]*$/u, 'must not contain control characters');
}

/** Error codes are SCREAMING_SNAKE tokens; the known ones are listed where they are used. */
export const errorCodeSchema = z
  .string()
  .regex(/^[A-Z][A-Z0-9_]{0,63}$/, 'error codes are 1-64 characters of A-Z, 0-9 and "_"');

export const errorSchema = z.object({
  code: errorCodeSchema,
  message: textSchema(4096),
});

/** The header every message starts with. */
export const envelope = {
  protocolVersion: z.literal(PROTOCOL_VERSION, {
    error: `protocolVersion must be the number ${PROTOCOL_VERSION}, the version this side speaks`,
  }),
  hostId: hostIdSchema,
};

/** Rejects lists whose items repeat a key (GPU UUIDs, indexes, shard ids). */
export function uniqueBy<T>(key: (item: T) => unknown, what: string) {
  return (items: T[], ctx: z.core.$RefinementCtx<T[]>) => {
    const seen = new Set<unknown>();
    for (const item of items) {
      const value = key(item);
      if (seen.has(value)) {
        ctx.addIssue({ code: 'custom', message: `duplicate ${what} ${JSON.stringify(value)}` });
      }
      seen.add(value);
    }
  };
}

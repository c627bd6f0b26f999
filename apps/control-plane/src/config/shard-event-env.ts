import { z } from 'zod';

/** How much shard event history the control plane keeps (events/shard-event-retention.ts). */
export interface ShardEventRetention {
  /** The newest events kept per shard; older ones are pruned. */
  readonly maxPerShard: number;
  /** Events older than this many days are pruned, whatever their shard. */
  readonly maxAgeDays: number;
}

export const MAX_EVENTS_PER_SHARD = 1_000_000;
export const MAX_RETENTION_DAYS = 3_650;

export const DEFAULT_SHARD_EVENT_RETENTION: ShardEventRetention = {
  maxPerShard: 1_000,
  maxAgeDays: 30,
};

const PER_SHARD_RULE = `must be a whole number from 1 to ${MAX_EVENTS_PER_SHARD}`;
const DAYS_RULE = `must be a whole number of days from 1 to ${MAX_RETENTION_DAYS}`;

/** Whether `retention` is within the bounds the environment variables accept. */
export function isShardEventRetention(retention: ShardEventRetention): boolean {
  const { maxPerShard, maxAgeDays } = retention;
  return (
    Number.isInteger(maxPerShard) &&
    maxPerShard >= 1 &&
    maxPerShard <= MAX_EVENTS_PER_SHARD &&
    Number.isInteger(maxAgeDays) &&
    maxAgeDays >= 1 &&
    maxAgeDays <= MAX_RETENTION_DAYS
  );
}

/** The retention's variables: part of the control plane's env schema (control-plane-config.ts). */
export const shardEventEnvShape = {
  GPUSHARDS_SHARD_EVENTS_PER_SHARD: z
    .string()
    .regex(/^\d{1,7}$/, PER_SHARD_RULE)
    .transform(Number)
    .refine((value) => value >= 1 && value <= MAX_EVENTS_PER_SHARD, PER_SHARD_RULE)
    .default(DEFAULT_SHARD_EVENT_RETENTION.maxPerShard),
  GPUSHARDS_SHARD_EVENT_RETENTION_DAYS: z
    .string()
    .regex(/^\d{1,4}$/, DAYS_RULE)
    .transform(Number)
    .refine((value) => value >= 1 && value <= MAX_RETENTION_DAYS, DAYS_RULE)
    .default(DEFAULT_SHARD_EVENT_RETENTION.maxAgeDays),
};

export function shardEventRetentionOf(env: {
  GPUSHARDS_SHARD_EVENTS_PER_SHARD: number;
  GPUSHARDS_SHARD_EVENT_RETENTION_DAYS: number;
}): ShardEventRetention {
  return {
    maxPerShard: env.GPUSHARDS_SHARD_EVENTS_PER_SHARD,
    maxAgeDays: env.GPUSHARDS_SHARD_EVENT_RETENTION_DAYS,
  };
}

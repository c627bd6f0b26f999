import { DEFAULT_FAIR_SHARE_HALF_LIFE_MS } from '@gpushards/limits';
import { readEnvVariables } from '@gpushards/protocol';
import { z } from 'zod';
import { ConfigError } from '../config/control-plane-config.js';

/** How the queue behaves; from the environment (GPUSHARDS_QUEUE_*), with defaults. */
export interface QueueOptions {
  /** Every replica runs an admission pass this often, whatever the signals (the backstop); 0: never. */
  readonly sweepMs: number;
  /** Fair share's half-life. */
  readonly halfLifeMs: number;
  /** What a reclaimed shard's container gets between SIGTERM and SIGKILL. */
  readonly reclaimGraceSeconds: number;
}

export const QUEUE_OPTIONS = Symbol('QueueOptions');

const HOUR_MS = 3_600_000;
export const DEFAULT_QUEUE_SWEEP_MS = 2000;
export const DEFAULT_RECLAIM_GRACE_SECONDS = 30;
/** A stop command's grace, as the agents take it (libs/protocol's stop command). */
const MAX_RECLAIM_GRACE_SECONDS = 600;
const MAX_SWEEP_MS = HOUR_MS;
/** Ten years: longer is no decay at all. */
const MAX_HALF_LIFE_HOURS = 87_600;

const SWEEP_RULE = `must be a whole number of milliseconds from 0 (no backstop pass) to ${MAX_SWEEP_MS}`;
const HALF_LIFE_RULE = `must be a number of hours more than 0 and at most ${MAX_HALF_LIFE_HOURS}`;
const GRACE_RULE = `must be a whole number of seconds from 0 to ${MAX_RECLAIM_GRACE_SECONDS}`;

const envSchema = z.object({
  GPUSHARDS_QUEUE_SWEEP_MS: z
    .string()
    .regex(/^\d{1,7}$/, SWEEP_RULE)
    .transform(Number)
    .refine((ms) => ms <= MAX_SWEEP_MS, SWEEP_RULE)
    .default(DEFAULT_QUEUE_SWEEP_MS),
  GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS: z
    .string()
    .regex(/^\d+(\.\d+)?$/, HALF_LIFE_RULE)
    .transform(Number)
    .refine((hours) => hours > 0 && hours <= MAX_HALF_LIFE_HOURS, HALF_LIFE_RULE)
    .optional(),
  GPUSHARDS_RECLAIM_GRACE_SECONDS: z
    .string()
    .regex(/^\d{1,3}$/, GRACE_RULE)
    .transform(Number)
    .refine((seconds) => seconds <= MAX_RECLAIM_GRACE_SECONDS, GRACE_RULE)
    .default(DEFAULT_RECLAIM_GRACE_SECONDS),
});

/**
 * Reads GPUSHARDS_QUEUE_SWEEP_MS (default 2000; 0: signals only), GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS
 * (more than 0; default libs/limits' DEFAULT_FAIR_SHARE_HALF_LIFE_MS) and
 * GPUSHARDS_RECLAIM_GRACE_SECONDS (0 to 600, default 30) through the shared reader: a bad value
 * is a ConfigError worded as every other setting's. Empty variables count as unset.
 */
export function queueOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): QueueOptions {
  const { values, problems } = readEnvVariables(envSchema, env);
  if (values === undefined) {
    throw new ConfigError(`invalid configuration:\n  ${problems.join('\n  ')}`);
  }
  return {
    sweepMs: values.GPUSHARDS_QUEUE_SWEEP_MS,
    halfLifeMs:
      values.GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS === undefined
        ? DEFAULT_FAIR_SHARE_HALF_LIFE_MS
        : values.GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS * HOUR_MS,
    reclaimGraceSeconds: values.GPUSHARDS_RECLAIM_GRACE_SECONDS,
  };
}

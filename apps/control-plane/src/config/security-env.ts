import { z } from 'zod';
import { DEFAULT_API_LIMITS, type SecurityConfig } from './api-limits.js';

function positiveInteger(max: number) {
  const rule = `must be a whole number from 1 to ${max}`;
  return z
    .string()
    .regex(/^\d{1,7}$/, rule)
    .transform(Number)
    .refine((value) => value >= 1 && value <= max, rule);
}

const trueOrFalse = z
  .enum(['true', 'false'], { message: 'must be true or false' })
  .transform((value) => value === 'true')
  .default(false);

/**
 * The environment variables of the API's limits and switches (docs/operations.md): part of
 * the control plane's env schema (control-plane-config.ts).
 */
export const securityEnvShape = {
  GPUSHARDS_PUBLIC_INTROSPECTION: trueOrFalse,
  GPUSHARDS_METRICS_TOKEN: z
    .string()
    .regex(/^[\x21-\x7e]{16,256}$/, 'must be 16 to 256 printable ASCII characters without spaces')
    .optional(),
  GPUSHARDS_IMAGE_ALLOW_LIST: z
    .string()
    .transform((value) =>
      value
        .split(',')
        .map((prefix) => prefix.trim())
        .filter((prefix) => prefix !== ''),
    )
    .default([]),
  GPUSHARDS_NO_AGENTS: trueOrFalse,
  GPUSHARDS_RATE_LIMIT_PER_SECOND: positiveInteger(1_000_000).default(
    DEFAULT_API_LIMITS.ratePerSecond,
  ),
  GPUSHARDS_RATE_LIMIT_BURST: positiveInteger(1_000_000).default(DEFAULT_API_LIMITS.rateBurst),
  GPUSHARDS_MAX_CONCURRENT_REQUESTS: positiveInteger(10_000).default(
    DEFAULT_API_LIMITS.maxConcurrent,
  ),
  GPUSHARDS_REQUEST_TIMEOUT_MS: positiveInteger(600_000).default(
    DEFAULT_API_LIMITS.requestTimeoutMs,
  ),
};

type SecurityEnv = z.infer<z.ZodObject<typeof securityEnvShape>>;

/** The SecurityConfig the parsed variables say. */
export function securityConfigOf(env: SecurityEnv): SecurityConfig {
  return {
    limits: {
      ...DEFAULT_API_LIMITS,
      ratePerSecond: env.GPUSHARDS_RATE_LIMIT_PER_SECOND,
      rateBurst: env.GPUSHARDS_RATE_LIMIT_BURST,
      maxConcurrent: env.GPUSHARDS_MAX_CONCURRENT_REQUESTS,
      requestTimeoutMs: env.GPUSHARDS_REQUEST_TIMEOUT_MS,
    },
    publicIntrospection: env.GPUSHARDS_PUBLIC_INTROSPECTION,
    metricsToken: env.GPUSHARDS_METRICS_TOKEN ?? null,
    imageAllowList: env.GPUSHARDS_IMAGE_ALLOW_LIST,
    noAgents: env.GPUSHARDS_NO_AGENTS,
    enforceLimits: true,
  };
}

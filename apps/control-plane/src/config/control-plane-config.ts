import { resolve } from 'node:path';
import { parseStuckSeconds, type StuckSeconds } from '@gpushards/limits';
import { readEnvVariables } from '@gpushards/protocol';
import { z } from 'zod';
import {
  databaseConfigFromEnv,
  DatabaseConfigError,
  DEFAULT_DATA_DIR,
  type DatabaseConfig,
} from '../database/index.js';
import type { LogLevel } from '../logging/logger.js';
import type { SecurityConfig } from './api-limits.js';
import { identityConfigOf, identityEnvShape, type IdentityConfig } from './identity-env.js';
import { securityConfigOf, securityEnvShape } from './security-env.js';
import {
  shardEventEnvShape,
  shardEventRetentionOf,
  type ShardEventRetention,
} from './shard-event-env.js';

/** Everything the control plane needs to start; built from the environment or given by a caller. */
export interface ControlPlaneConfig {
  /** TCP port to listen on; 0 picks a free one (tests). */
  readonly port: number;
  readonly host: string;
  /**
   * Absolute path of the data folder: the admin token file, and the embedded database when
   * no DATABASE_URL is given.
   */
  readonly dataDir: string;
  readonly database: DatabaseConfig;
  /**
   * A host that has not sent a heartbeat for this long becomes OFFLINE, its live shards LOST
   * and their reservations released.
   */
  readonly hostOfflineSeconds: number;
  /**
   * Seconds a shard may stay PENDING, PLACED, STARTING or STOPPING before it counts as stuck
   * (0: never); libs/limits DEFAULT_STUCK_SECONDS when absent.
   */
  readonly stuckSeconds?: StuckSeconds;
  /**
   * What agents do to a shard past its cap + tolerance (real GPU memory, NVML), unless its
   * team has its own (Team.capPolicy); default kill.
   */
  readonly capPolicy?: 'kill' | 'stop' | 'report';
  /** API limits, endpoint switches, image allow-list (config/api-limits.ts). */
  readonly security: SecurityConfig;
  /**
   * The key that seals secret env values (base64 of 32 bytes, GPUSHARDS_SECRETS_KEY); when
   * unset, <data folder>/secrets.key (created on first start). See secrets/secrets-key.ts.
   */
  readonly secretsKey?: string | undefined;
  /**
   * The team portal's built files (apps/portal/dist), served at `/`; when unset or not built,
   * `/` says how to build it and links to the explorer.
   */
  readonly portalDir?: string | undefined;
  /**
   * How much shard event history is kept (GPUSHARDS_SHARD_EVENTS_PER_SHARD,
   * GPUSHARDS_SHARD_EVENT_RETENTION_DAYS); DEFAULT_SHARD_EVENT_RETENTION when absent.
   */
  readonly shardEventRetention?: ShardEventRetention;
  /** Sign-in through OpenID Connect (GPUSHARDS_OIDC_*); absent: API tokens only. */
  readonly identity?: IdentityConfig;
}

/** What `node dist/main.js` reads from its environment: the config and how much to log. */
export interface ControlPlaneEnv extends ControlPlaneConfig {
  readonly logLevel: LogLevel;
}

export const CONTROL_PLANE_CONFIG = Symbol('ControlPlaneConfig');

export const DEFAULT_PORT = 4000;
export const DEFAULT_HOST = '127.0.0.1';
/** Six heartbeats at the agent's default interval (10 s). */
export const DEFAULT_HOST_OFFLINE_SECONDS = 60;
export const MIN_HOST_OFFLINE_SECONDS = 5;
export const MAX_HOST_OFFLINE_SECONDS = 86_400;

const HOST_OFFLINE_SECONDS_RULE = `must be a whole number of seconds from ${MIN_HOST_OFFLINE_SECONDS} to ${MAX_HOST_OFFLINE_SECONDS}`;

export function isHostOfflineSeconds(value: number): boolean {
  return (
    Number.isInteger(value) &&
    value >= MIN_HOST_OFFLINE_SECONDS &&
    value <= MAX_HOST_OFFLINE_SECONDS
  );
}

const envSchema = z.object({
  GPUSHARDS_PORT: z
    .string()
    .regex(/^\d{1,5}$/, 'must be a whole number from 0 to 65535')
    .transform(Number)
    .refine((port) => port <= 65535, 'must be a whole number from 0 to 65535')
    .default(DEFAULT_PORT),
  GPUSHARDS_HOST: z
    .string()
    .trim()
    .regex(/^[A-Za-z0-9.:[\]%-]+$/, 'must be an address or host name, like 127.0.0.1 or ::')
    .default(DEFAULT_HOST),
  GPUSHARDS_DATA_DIR: z.string().default(DEFAULT_DATA_DIR),
  GPUSHARDS_PORTAL_DIR: z.string().optional(),
  GPUSHARDS_SECRETS_KEY: z.string().optional(),
  GPUSHARDS_HOST_OFFLINE_SECONDS: z
    .string()
    .regex(/^\d{1,6}$/, HOST_OFFLINE_SECONDS_RULE)
    .transform(Number)
    .refine(isHostOfflineSeconds, HOST_OFFLINE_SECONDS_RULE)
    .default(DEFAULT_HOST_OFFLINE_SECONDS),
  GPUSHARDS_STUCK_SECONDS: z
    .string()
    .transform((text, context) => {
      const parsed = parseStuckSeconds(text);
      if (parsed.ok) return parsed.limits;
      context.addIssue({ code: 'custom', message: parsed.message });
      return z.NEVER;
    })
    .optional(),
  GPUSHARDS_CAP_POLICY: z
    .enum(['kill', 'stop', 'report'], { message: 'must be one of kill, stop, report' })
    .default('kill'),
  ...securityEnvShape,
  ...shardEventEnvShape,
  ...identityEnvShape,
  GPUSHARDS_LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      message: 'must be one of fatal, error, warn, info, debug, trace, silent',
    })
    .default('info'),
});

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/**
 * Reads GPUSHARDS_PORT (default 4000), GPUSHARDS_HOST (default 127.0.0.1), GPUSHARDS_DATA_DIR
 * (default .gpushards under `cwd`), GPUSHARDS_HOST_OFFLINE_SECONDS (default 60, 5 to 86400),
 * GPUSHARDS_STUCK_SECONDS (`PLACED=120,STARTING=900,...`: when a shard in that state counts as
 * stuck), GPUSHARDS_CAP_POLICY (kill, stop or report; default kill), GPUSHARDS_LOG_LEVEL
 * (default info), GPUSHARDS_SECRETS_KEY (the key sealing secret env values; default
 * <data folder>/secrets.key), the API switches and limits (security-env.ts), the shard event
 * history's retention (shard-event-env.ts), GPUSHARDS_PORTAL_DIR (the
 * built portal; none) and, through
 * databaseConfigFromEnv, DATABASE_URL and
 * GPUSHARDS_DATABASE_POOL_SIZE. Empty variables count as unset. Throws ConfigError naming
 * every bad variable and what it should look like, never echoing DATABASE_URL (it may hold a
 * password).
 */
export function loadConfigFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): ControlPlaneEnv {
  const { values, problems } = readEnvVariables(envSchema, env, {
    secret: new Set([
      'GPUSHARDS_METRICS_TOKEN',
      'GPUSHARDS_SECRETS_KEY',
      'GPUSHARDS_OIDC_CLIENT_SECRET',
    ]),
  });
  let database: DatabaseConfig | undefined;
  try {
    database = databaseConfigFromEnv(env, cwd);
  } catch (error) {
    if (!(error instanceof DatabaseConfigError)) throw error;
    problems.push(...error.problems);
  }
  const identity =
    values === undefined
      ? undefined
      : identityConfigOf(
          values,
          publicUrlOf(values.GPUSHARDS_HOST, values.GPUSHARDS_PORT),
          problems,
        );
  if (values === undefined || database === undefined || problems.length > 0) {
    throw new ConfigError(`invalid configuration:\n  ${problems.join('\n  ')}`);
  }
  return {
    port: values.GPUSHARDS_PORT,
    host: values.GPUSHARDS_HOST,
    dataDir: resolve(cwd, values.GPUSHARDS_DATA_DIR),
    database,
    hostOfflineSeconds: values.GPUSHARDS_HOST_OFFLINE_SECONDS,
    ...(values.GPUSHARDS_STUCK_SECONDS === undefined
      ? {}
      : { stuckSeconds: values.GPUSHARDS_STUCK_SECONDS }),
    capPolicy: values.GPUSHARDS_CAP_POLICY,
    security: securityConfigOf(values),
    shardEventRetention: shardEventRetentionOf(values),
    logLevel: values.GPUSHARDS_LOG_LEVEL,
    ...(values.GPUSHARDS_SECRETS_KEY === undefined
      ? {}
      : { secretsKey: values.GPUSHARDS_SECRETS_KEY }),
    ...(values.GPUSHARDS_PORTAL_DIR === undefined
      ? {}
      : { portalDir: resolve(cwd, values.GPUSHARDS_PORTAL_DIR) }),
    ...(identity === undefined ? {} : { identity }),
  };
}

/** Where the control plane is reached when GPUSHARDS_PUBLIC_URL does not say. */
function publicUrlOf(host: string, port: number): string {
  const name =
    host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  return `http://${name}:${port}`;
}

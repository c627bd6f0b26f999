import { join, resolve } from 'node:path';
import { readEnvVariables } from '@gpushards/protocol';
import { z } from 'zod';

/** How the control plane reaches its database. */
export interface DatabaseConfig {
  /**
   * PostgreSQL connection string. When absent the embedded database (PGlite) in
   * `embeddedDataDir` is used instead.
   */
  readonly url?: string | undefined;
  /** Folder of the embedded database; created when missing. Ignored when `url` is set. */
  readonly embeddedDataDir: string;
  /** Most connections the PostgreSQL pool opens. PGlite always has exactly one. */
  readonly poolSize?: number | undefined;
  /**
   * fsync the embedded database's WAL on every commit (default true), so that a crash of the
   * machine, not only of the process, loses no committed transaction. Throwaway test
   * databases turn it off for speed.
   */
  readonly embeddedDurable?: boolean | undefined;
}

export const DEFAULT_POOL_SIZE = 10;

/** The data folder's default, relative to the working directory (ignored by git). */
export const DEFAULT_DATA_DIR = '.gpushards';

/** The embedded database lives in this subfolder of the data folder. */
export const EMBEDDED_DATABASE_SUBDIR = 'database';

/** The database's settings are wrong: one line per wrong variable (problems). */
export class DatabaseConfigError extends Error {
  override name = 'DatabaseConfigError';
  constructor(readonly problems: readonly string[]) {
    super(problems.join('\n'));
  }
}

const POOL_SIZE_RULE = 'must be a whole number from 1 to 1000';

const envSchema = z.object({
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, 'must be a postgresql:// URL')
    .optional(),
  GPUSHARDS_DATABASE_POOL_SIZE: z
    .string()
    .regex(/^\d{1,4}$/, POOL_SIZE_RULE)
    .transform(Number)
    .refine((size) => size >= 1 && size <= 1000, POOL_SIZE_RULE)
    .optional(),
  GPUSHARDS_DATA_DIR: z.string().default(DEFAULT_DATA_DIR),
});

/**
 * Reads DATABASE_URL, GPUSHARDS_DATA_DIR (the embedded database goes into its `database`
 * subfolder; default `.gpushards` under `cwd`) and GPUSHARDS_DATABASE_POOL_SIZE (1 to 1000)
 * through the shared reader, as every other setting. Empty variables count as unset. A bad
 * value is a DatabaseConfigError; DATABASE_URL's value is never shown (it may hold a password).
 */
export function databaseConfigFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): DatabaseConfig {
  const { values, problems } = readEnvVariables(envSchema, env, {
    secret: new Set(['DATABASE_URL']),
  });
  if (values === undefined) throw new DatabaseConfigError(problems);
  const dataDir = resolve(cwd, values.GPUSHARDS_DATA_DIR);
  return {
    url: values.DATABASE_URL,
    embeddedDataDir: join(dataDir, EMBEDDED_DATABASE_SUBDIR),
    poolSize: values.GPUSHARDS_DATABASE_POOL_SIZE,
  };
}

/** Says where the database is without revealing credentials, for logs and errors. */
export function describeDatabase(config: DatabaseConfig): string {
  if (config.url === undefined) return `embedded PGlite in ${config.embeddedDataDir}`;
  try {
    const url = new URL(config.url);
    const socketHost = url.searchParams.get('host');
    return `PostgreSQL ${url.hostname || socketHost || 'localhost'}:${url.port || 5432}${url.pathname}`;
  } catch {
    return 'PostgreSQL (unparsable URL)';
  }
}

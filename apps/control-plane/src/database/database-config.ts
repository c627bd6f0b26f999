import { join, resolve } from 'node:path';

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

export class DatabaseConfigError extends Error {
  override name = 'DatabaseConfigError';
}

/**
 * Reads DATABASE_URL, GPUSHARDS_DATA_DIR (the embedded database goes into its `database`
 * subfolder; default `.gpushards` under `cwd`) and GPUSHARDS_DATABASE_POOL_SIZE. Empty
 * variables count as unset.
 */
export function databaseConfigFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd(),
): DatabaseConfig {
  const url = env['DATABASE_URL'] || undefined;
  if (url !== undefined && !/^postgres(ql)?:\/\//.test(url)) {
    // Never echo the value: it may carry a password.
    throw new DatabaseConfigError('DATABASE_URL must be a postgresql:// URL');
  }
  const poolSizeText = env['GPUSHARDS_DATABASE_POOL_SIZE'] || undefined;
  const poolSize = poolSizeText === undefined ? undefined : Number(poolSizeText);
  if (
    poolSize !== undefined &&
    !(Number.isInteger(poolSize) && poolSize >= 1 && poolSize <= 1000)
  ) {
    throw new DatabaseConfigError(
      `GPUSHARDS_DATABASE_POOL_SIZE must be a whole number from 1 to 1000, not "${poolSizeText}"`,
    );
  }
  const dataDir = resolve(cwd, env['GPUSHARDS_DATA_DIR'] || DEFAULT_DATA_DIR);
  return { url, embeddedDataDir: join(dataDir, EMBEDDED_DATABASE_SUBDIR), poolSize };
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

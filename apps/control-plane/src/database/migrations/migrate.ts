import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { SqlMigrationAwareDriverAdapterFactory } from '@prisma/driver-adapter-utils';
import type { DiagnoseMigrationHistoryOutput, SchemaFilter } from '@prisma/schema-engine-wasm';
import { openDatabaseBackend } from '../database-backend.js';
import { describeDatabase, type DatabaseConfig } from '../database-config.js';
import { EmbeddedAdapterFactory, openEmbeddedDatabase } from '../embedded-database.js';
import {
  findPrismaFolder,
  MIGRATION_LOCK_CONTENT,
  MIGRATION_LOCK_FILE,
  migrationTimestamp,
  readMigrationList,
  readSchemaFiles,
  type PrismaFolder,
} from './migration-files.js';
import { withSchemaEngine } from './schema-engine.js';

const NO_FILTER: SchemaFilter = { externalTables: [], externalEnums: [] };

export class MigrationError extends Error {
  override name = 'MigrationError';
}

/** The engine rejects with plain objects or strings; give callers an Error with its message. */
function engineError(doing: string, error: unknown): MigrationError {
  const message =
    error instanceof Error
      ? error.message
      : typeof error === 'object' && error !== null && 'message' in error
        ? String((error as { message: unknown }).message)
        : String(error);
  return new MigrationError(`${doing}: ${message}`, { cause: error });
}

/** Applies every migration of `folder` the database does not have yet; returns their names. */
export async function applyPendingMigrations(
  adapter: SqlMigrationAwareDriverAdapterFactory,
  folder: PrismaFolder = findPrismaFolder(),
): Promise<string[]> {
  const migrationsList = await readMigrationList(folder);
  // Every start of a control plane comes here; nearly always nothing is pending, and the
  // schema engine costs a second of CPU to instantiate (schema-engine.ts). It is skipped when
  // the database says at once that every migration of the folder is applied and none failed:
  // the engine would apply nothing then. Anything else (a table missing, a failed or pending
  // migration, a file that cannot be read) goes to the engine, which applies or explains.
  if (await everyMigrationApplied(adapter, migrationsList)) return [];
  return withSchemaEngine(adapter, await readSchemaFiles(folder), async (engine) => {
    try {
      const { appliedMigrationNames } = await engine.applyMigrations({
        migrationsList,
        filters: NO_FILTER,
      });
      return appliedMigrationNames;
    } catch (error) {
      throw engineError('applying migrations failed', error);
    }
  });
}

/**
 * Whether `_prisma_migrations` holds every migration of the list as finished and not rolled
 * back, and no migration that started and neither finished nor was rolled back (the engine
 * refuses to go on past one). False when the table cannot be read.
 */
async function everyMigrationApplied(
  adapterFactory: SqlMigrationAwareDriverAdapterFactory,
  list: Awaited<ReturnType<typeof readMigrationList>>,
): Promise<boolean> {
  if (list.migrationDirectories.some((dir) => dir.migrationFile.content.tag !== 'ok')) {
    return false;
  }
  let adapter;
  try {
    adapter = await adapterFactory.connect();
  } catch {
    return false;
  }
  try {
    const result = await adapter.queryRaw({
      sql: `SELECT migration_name, finished_at IS NOT NULL AS finished
              FROM _prisma_migrations WHERE rolled_back_at IS NULL`,
      args: [],
      argTypes: [],
    });
    const applied = new Set<string>();
    for (const [name, finished] of result.rows) {
      if (finished !== true) return false;
      applied.add(String(name));
    }
    return list.migrationDirectories.every((dir) => applied.has(dir.path));
  } catch {
    return false;
  } finally {
    await adapter.dispose().catch(() => undefined);
  }
}

export interface MigrationStatus {
  /** In the migrations folder, not yet applied. */
  readonly pending: readonly string[];
  /** Applied to the database but not in the folder (the folder is older than the database). */
  readonly notInFolder: readonly string[];
  /** Started and failed; `deploy` refuses to continue until someone resolves them. */
  readonly failed: readonly string[];
  /** Applied, but their migration.sql has changed since. */
  readonly edited: readonly string[];
  readonly upToDate: boolean;
}

export async function readMigrationStatus(
  adapter: SqlMigrationAwareDriverAdapterFactory,
  folder: PrismaFolder = findPrismaFolder(),
): Promise<MigrationStatus> {
  const migrationsList = await readMigrationList(folder);
  const diagnosis = await withSchemaEngine(adapter, await readSchemaFiles(folder), (engine) =>
    engine
      .diagnoseMigrationHistory({
        migrationsList,
        optInToShadowDatabase: false,
        filters: NO_FILTER,
      })
      .catch((error: unknown) => {
        throw engineError('reading the migration history failed', error);
      }),
  );
  return toStatus(diagnosis);
}

function toStatus(diagnosis: DiagnoseMigrationHistoryOutput): MigrationStatus {
  const history = diagnosis.history;
  const pending =
    history === null
      ? []
      : history.diagnostic === 'migrationsDirectoryIsBehind'
        ? []
        : history.unappliedMigrationNames;
  const notInFolder =
    history === null || history.diagnostic === 'databaseIsBehind'
      ? []
      : history.unpersistedMigrationNames;
  const failed = diagnosis.failedMigrationNames;
  const edited = diagnosis.editedMigrationNames;
  const upToDate =
    pending.length === 0 && notInFolder.length === 0 && failed.length === 0 && edited.length === 0;
  return { pending, notInFolder, failed, edited, upToDate };
}

/**
 * The SQL that would take a database built from the migrations to what schema.prisma
 * describes; empty when they agree. Runs on a throwaway in-memory PGlite, which serves as
 * both the engine's main and shadow database.
 */
export async function diffMigrationsToSchema(
  folder: PrismaFolder = findPrismaFolder(),
): Promise<string> {
  const migrationsList = await readMigrationList(folder);
  const schemaFiles = await readSchemaFiles(folder);
  const scratch = await openEmbeddedDatabase(undefined, { durable: false });
  try {
    const adapter = new EmbeddedAdapterFactory(scratch.pglite, { shadowIsMain: true });
    const result = await withSchemaEngine(adapter, schemaFiles, (engine) =>
      engine
        .diff({
          from: { tag: 'migrations', ...migrationsList },
          to: { tag: 'schemaDatamodel', files: schemaFiles.map((file) => ({ ...file })) },
          script: true,
          exitCode: null,
          filters: NO_FILTER,
        })
        .catch((error: unknown) => {
          throw engineError('diffing the migrations against schema.prisma failed', error);
        }),
    );
    return isEmptyScript(result.stdout ?? '') ? '' : (result.stdout ?? '');
  } finally {
    await scratch.close();
  }
}

/** The engine answers "-- This is an empty migration." when nothing changes. */
function isEmptyScript(script: string): boolean {
  return script.split('\n').every((line) => line.trim() === '' || line.trim().startsWith('--'));
}

export interface CreatedMigration {
  readonly name: string;
  readonly path: string;
  readonly sql: string;
}

/**
 * Writes `<migrations>/<timestamp>_<name>/migration.sql` with what schema.prisma adds to
 * the existing migrations; undefined when there is nothing to add. Hand-written SQL (CHECK
 * constraints, data fixes) goes at the end of the file before it is committed.
 */
export async function createMigration(
  name: string,
  folder: PrismaFolder = findPrismaFolder(),
  now: Date = new Date(),
): Promise<CreatedMigration | undefined> {
  if (!/^[a-z0-9]+(_[a-z0-9]+)*$/.test(name)) {
    throw new MigrationError(`migration name "${name}" must be snake_case: a-z, 0-9 and _`);
  }
  await mkdir(folder.migrationsDir, { recursive: true });
  const lockPath = join(folder.migrationsDir, MIGRATION_LOCK_FILE);
  // The engine refuses to diff a migration history without its lock file.
  if (!existsSync(lockPath)) await writeFile(lockPath, MIGRATION_LOCK_CONTENT);
  const sql = await diffMigrationsToSchema(folder);
  if (sql === '') return undefined;
  const fullName = `${migrationTimestamp(now)}_${name}`;
  const dir = join(folder.migrationsDir, fullName);
  await mkdir(dir);
  const path = join(dir, 'migration.sql');
  await writeFile(path, sql);
  return { name: fullName, path, sql };
}

/**
 * Opens the configured database, applies pending migrations and closes it again; for
 * callers that do not hold the database open themselves (the CLI, a deploy step). The
 * control plane migrates through its own connection instead (PrismaService), because an
 * embedded database can be open in one place only.
 */
export async function migrateDatabase(
  config: DatabaseConfig,
  folder: PrismaFolder = findPrismaFolder(),
): Promise<string[]> {
  try {
    return await withMigrationAdapter(config, (adapter) => applyPendingMigrations(adapter, folder));
  } catch (error) {
    if (error instanceof MigrationError) {
      throw new MigrationError(`${describeDatabase(config)}: ${error.message}`, { cause: error });
    }
    throw error;
  }
}

/**
 * Marks a failed migration as rolled back (after someone repaired the database by hand), so
 * that the next apply runs it again.
 */
export async function markMigrationRolledBack(
  adapter: SqlMigrationAwareDriverAdapterFactory,
  migrationName: string,
  folder: PrismaFolder = findPrismaFolder(),
): Promise<void> {
  await withSchemaEngine(adapter, await readSchemaFiles(folder), (engine) =>
    engine.markMigrationRolledBack({ migrationName }).catch((error: unknown) => {
      throw engineError(`marking ${migrationName} rolled back failed`, error);
    }),
  );
}

export async function migrationStatusOf(
  config: DatabaseConfig,
  folder: PrismaFolder = findPrismaFolder(),
): Promise<MigrationStatus> {
  return withMigrationAdapter(config, (adapter) => readMigrationStatus(adapter, folder));
}

/** Opens the configured database for `work` with the schema engine's adapter, then closes it. */
export async function withMigrationAdapter<T>(
  config: DatabaseConfig,
  work: (adapter: SqlMigrationAwareDriverAdapterFactory) => Promise<T>,
): Promise<T> {
  const backend = await openDatabaseBackend(config);
  try {
    return await work(backend.migrationAdapter);
  } finally {
    await backend.close();
  }
}

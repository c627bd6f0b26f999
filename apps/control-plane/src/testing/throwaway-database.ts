import { randomBytes } from 'node:crypto';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { DatabaseConfig } from '../database/database-config.js';
import { findPrismaFolder, type PrismaFolder } from '../database/migrations/migration-files.js';
import { PrismaService } from '../database/prisma.service.js';
import { startPostgres, type PostgresServer } from './postgres-server.js';

export type TestDatabaseKind = 'postgres' | 'pglite';

/** Both backends, for tests that must hold on each: `for (const kind of TEST_DATABASE_KINDS)`. */
export const TEST_DATABASE_KINDS: readonly TestDatabaseKind[] = ['postgres', 'pglite'];

/** A migrated, empty database of its own, with a connected PrismaService. */
export interface TestDatabase {
  readonly kind: TestDatabaseKind;
  readonly prisma: PrismaService;
  /** What `prisma` was opened with: open a second service on the same database with it. */
  readonly config: DatabaseConfig;
  /** The PostgreSQL server it lives on (kind 'postgres'). */
  readonly server?: PostgresServer;
  /** Closes the service and deletes the database (and a server or folder it started). */
  cleanup(): Promise<void>;
}

export interface TestDatabaseOptions {
  /**
   * PostgreSQL: a running server to create the database on (cleanup drops only the
   * database). Without it, a server is started for this database and stopped by cleanup.
   */
  readonly server?: PostgresServer;
  /** Another schema and migrations than the repository's (migration tests). */
  readonly prismaFolder?: PrismaFolder;
  /** PGlite: fsync on commit; off by default for speed. */
  readonly durable?: boolean;
}

/**
 * A fresh database of `kind`, migrated with the repository's migrations. PostgreSQL:
 * `CREATE DATABASE` on the given or a new throwaway server (see startPostgres); PGlite: a new
 * data folder under the OS temp folder.
 */
export async function createTestDatabase(
  kind: TestDatabaseKind,
  options: TestDatabaseOptions = {},
): Promise<TestDatabase> {
  const prismaFolder = options.prismaFolder ?? findPrismaFolder();
  return kind === 'postgres'
    ? createPostgresTestDatabase(options.server, prismaFolder)
    : createPgliteTestDatabase(options.durable ?? false, prismaFolder);
}

async function createPostgresTestDatabase(
  givenServer: PostgresServer | undefined,
  prismaFolder: PrismaFolder,
): Promise<TestDatabase> {
  const server = givenServer ?? (await startPostgres());
  const stopOwnServer = () => (givenServer === undefined ? server.stop() : Promise.resolve());
  const name = `gpushards_test_${randomBytes(6).toString('hex')}`;
  try {
    await runAsSuperuser(server, `CREATE DATABASE "${name}"`);
    const config: DatabaseConfig = {
      url: server.urlFor(name),
      embeddedDataDir: '',
      poolSize: 5,
    };
    const prisma = await PrismaService.open(config, prismaFolder);
    return {
      kind: 'postgres',
      prisma,
      config,
      server,
      cleanup: async () => {
        await prisma.close();
        if (givenServer === undefined) return server.stop();
        await runAsSuperuser(server, `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      },
    };
  } catch (error) {
    await stopOwnServer();
    throw error;
  }
}

async function createPgliteTestDatabase(
  durable: boolean,
  prismaFolder: PrismaFolder,
): Promise<TestDatabase> {
  const template = await migratedPgliteTemplate(prismaFolder);
  const dir = mkdtempSync(join(tmpdir(), 'gpushards-pglite-'));
  const config: DatabaseConfig = {
    embeddedDataDir: join(dir, 'database'),
    embeddedDurable: durable,
  };
  try {
    cpSync(template, config.embeddedDataDir, { recursive: true });
    const prisma = await PrismaService.open(config, prismaFolder);
    return {
      kind: 'pglite',
      prisma,
      config,
      cleanup: async () => {
        await prisma.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}

async function runAsSuperuser(server: PostgresServer, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/**
 * Migrated PGlite data folders by prisma folder, one per test process: a new PGlite folder
 * takes seconds to initialize, a copy of a closed one opens in well under one. Deleted when
 * the process exits.
 */
const pgliteTemplates = new Map<string, Promise<string>>();

function migratedPgliteTemplate(prismaFolder: PrismaFolder): Promise<string> {
  let template = pgliteTemplates.get(prismaFolder.dir);
  if (template === undefined) {
    template = buildPgliteTemplate(prismaFolder);
    pgliteTemplates.set(prismaFolder.dir, template);
    template.catch(() => pgliteTemplates.delete(prismaFolder.dir));
  }
  return template;
}

async function buildPgliteTemplate(prismaFolder: PrismaFolder): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'gpushards-pglite-template-'));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  const dataDir = join(dir, 'database');
  const prisma = await PrismaService.open(
    { embeddedDataDir: dataDir, embeddedDurable: false },
    prismaFolder,
  );
  await prisma.close();
  return dataDir;
}

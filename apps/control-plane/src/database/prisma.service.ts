import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { pino } from 'pino';
import type {
  SqlDriverAdapter,
  SqlMigrationAwareDriverAdapterFactory,
} from '@prisma/driver-adapter-utils';
import { openDatabaseBackend, type DatabaseBackend } from './database-backend.js';
import { DirectSql } from './direct-sql.js';
import { describeDatabase, type DatabaseConfig } from './database-config.js';
import { PrismaClient } from './generated/client.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { applyPendingMigrations } from './migrations/migrate.js';
import { findPrismaFolder, type PrismaFolder } from './migrations/migration-files.js';

export const DATABASE_CONFIG = Symbol('DatabaseConfig');

/**
 * The generated PrismaClient, connected to PostgreSQL (DATABASE_URL) or to the embedded
 * PGlite database, and migrated before the application serves: `onModuleInit` opens the
 * database, applies pending migrations and connects; `onModuleDestroy` disconnects and closes
 * the database. Outside Nest use `PrismaService.open(config)` and `close()`.
 *
 * Transactions and serialization:
 * - PostgreSQL: a pool of connections; `$transaction(async (tx) => ...)` runs on one of them
 *   at READ COMMITTED unless told otherwise. Serialize per team with `lockTeamForUpdate(tx,
 *   teamId)` (a transaction-scoped advisory lock) or `SELECT ... FOR UPDATE` on the rows.
 * - PGlite: a single connection. An interactive transaction holds it until it ends, so
 *   transactions never interleave (serial by construction) and `isolationLevel` is ignored.
 *   Inside `$transaction(async (tx) => ...)` use only `tx`: a query through the service
 *   itself waits for the transaction to end, which waits for the query: a deadlock.
 */
@Injectable()
export class PrismaService extends PrismaClient implements OnModuleInit, OnModuleDestroy {
  private readonly logger: Logger;
  private readonly connection: DeferredBackend;
  /** Raw SQL on the client's own pool without the client's interpreter, for hot paths. */
  readonly direct: DirectSql;

  constructor(
    @Inject(DATABASE_CONFIG) readonly config: DatabaseConfig,
    @Inject(LOGGER) logger: Logger,
  ) {
    const databaseLogger = logger.child({ module: 'database' });
    const connection = new DeferredBackend(config, databaseLogger);
    super({ adapter: connection.clientAdapterFactory() });
    this.logger = databaseLogger;
    this.connection = connection;
    this.direct = new DirectSql(() => connection.directAdapter());
  }

  /**
   * A connected, migrated service outside Nest (scripts, tests); what it logs (the migrations
   * it applied) goes to `logger`, nowhere by default.
   */
  static async open(
    config: DatabaseConfig,
    prismaFolder: PrismaFolder = findPrismaFolder(),
    logger: Logger = pino({ level: 'silent' }),
  ): Promise<PrismaService> {
    const service = new PrismaService(config, logger);
    try {
      await service.connectAndMigrate(prismaFolder);
    } catch (error) {
      await service.close();
      throw error;
    }
    return service;
  }

  get backendKind(): DatabaseBackend['kind'] {
    return this.config.url === undefined ? 'pglite' : 'postgres';
  }

  async onModuleInit(): Promise<void> {
    await this.connectAndMigrate(findPrismaFolder());
  }

  async onModuleDestroy(): Promise<void> {
    await this.close();
  }

  /** Opens the database, applies pending migrations, connects the client. */
  async connectAndMigrate(prismaFolder: PrismaFolder): Promise<void> {
    const backend = await this.connection.open();
    const applied = await applyPendingMigrations(backend.migrationAdapter, prismaFolder);
    if (applied.length > 0) {
      this.logger.info(
        { database: describeDatabase(this.config), migrations: applied },
        'applied migrations',
      );
      // PGlite learns array types (shard_state[] and the like) when it opens; types the
      // migrations just created would otherwise be unknown until the next start.
      await backend.pglite?.refreshArrayTypes();
    }
    await this.$connect();
  }

  /** Disconnects the client and closes the database; safe to call more than once. */
  async close(): Promise<void> {
    await this.$disconnect();
    await this.connection.close();
  }

  /** The open backend (PGlite instance included); opens it if needed. */
  backend(): Promise<DatabaseBackend> {
    return this.connection.open();
  }
}

/**
 * PrismaClient wants its adapter in the constructor, but opening PGlite is asynchronous;
 * this hands PrismaClient a factory that opens the backend on first use.
 */
class DeferredBackend {
  private opening: Promise<DatabaseBackend> | undefined;
  private direct: Promise<SqlDriverAdapter> | undefined;

  constructor(
    private readonly config: DatabaseConfig,
    private readonly logger: Logger,
  ) {}

  open(): Promise<DatabaseBackend> {
    this.opening ??= openDatabaseBackend(this.config, (error) =>
      this.logger.warn({ err: error }, 'the database ended an idle connection'),
    );
    return this.opening;
  }

  /** DirectSql's adapter: on PostgreSQL over the client's pool, on PGlite over the same PGlite. */
  directAdapter(): Promise<SqlDriverAdapter> {
    this.direct ??= this.open().then((backend) => backend.clientAdapter.connect());
    return this.direct;
  }

  async close(): Promise<void> {
    const opening = this.opening;
    const direct = this.direct;
    this.opening = undefined;
    this.direct = undefined;
    if (direct !== undefined) await (await direct).dispose();
    if (opening !== undefined) await (await opening).close();
  }

  clientAdapterFactory(): SqlMigrationAwareDriverAdapterFactory {
    return {
      provider: 'postgres',
      adapterName: this.config.url === undefined ? 'pglite-prisma-adapter' : '@prisma/adapter-pg',
      connect: async (): Promise<SqlDriverAdapter> => (await this.open()).clientAdapter.connect(),
      connectToShadowDb: async (): Promise<SqlDriverAdapter> =>
        (await this.open()).clientAdapter.connectToShadowDb(),
    };
  }
}

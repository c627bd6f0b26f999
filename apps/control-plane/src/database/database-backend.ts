import type { PGlite } from '@electric-sql/pglite';
import { PrismaPg } from '@prisma/adapter-pg';
import type {
  SqlDriverAdapter,
  SqlMigrationAwareDriverAdapterFactory,
} from '@prisma/driver-adapter-utils';
import { DEFAULT_POOL_SIZE, type DatabaseConfig } from './database-config.js';
import { EmbeddedAdapterFactory, openEmbeddedDatabase } from './embedded-database.js';

/**
 * One open database, whichever kind: the driver adapter factories for PrismaClient and for
 * the schema engine (migrations), and how to let go of it.
 */
export interface DatabaseBackend {
  readonly kind: 'postgres' | 'pglite';
  /** For PrismaClient. */
  readonly clientAdapter: SqlMigrationAwareDriverAdapterFactory;
  /**
   * For the schema engine. On PostgreSQL a separate single-connection pool: the engine's
   * session-level advisory lock (which keeps two control planes from migrating at once)
   * must be taken and released on the same connection.
   */
  readonly migrationAdapter: SqlMigrationAwareDriverAdapterFactory;
  /** The embedded database, for code that needs PGlite itself (tests, dumps). */
  readonly pglite?: PGlite;
  /** Closes the embedded database. PostgreSQL pools are closed by whoever connected them. */
  close(): Promise<void>;
}

export async function openDatabaseBackend(config: DatabaseConfig): Promise<DatabaseBackend> {
  if (config.url !== undefined) {
    const url = config.url;
    return {
      kind: 'postgres',
      clientAdapter: new PrismaPg({
        connectionString: url,
        max: config.poolSize ?? DEFAULT_POOL_SIZE,
      }),
      migrationAdapter: new NoShadowAdapterFactory(new PrismaPg({ connectionString: url, max: 1 })),
      close: async () => {},
    };
  }
  const pglite = await openEmbeddedDatabase(config.embeddedDataDir, {
    durable: config.embeddedDurable ?? true,
  });
  const adapter = new EmbeddedAdapterFactory(pglite);
  return {
    kind: 'pglite',
    clientAdapter: adapter,
    migrationAdapter: adapter,
    pglite,
    close: () => pglite.close(),
  };
}

/**
 * @prisma/adapter-pg's shadow database keeps the connection string's database name, so the
 * engine would replay migrations into the real database. Nothing here needs a shadow
 * database on PostgreSQL (diffs use in-memory PGlite), so asking for one is a bug.
 */
class NoShadowAdapterFactory implements SqlMigrationAwareDriverAdapterFactory {
  readonly provider = 'postgres';
  readonly adapterName: string;

  constructor(private readonly inner: PrismaPg) {
    this.adapterName = inner.adapterName;
  }

  connect(): Promise<SqlDriverAdapter> {
    return this.inner.connect();
  }

  connectToShadowDb(): Promise<SqlDriverAdapter> {
    return Promise.reject(
      new Error('no shadow database on PostgreSQL here: diff against in-memory PGlite instead'),
    );
  }
}

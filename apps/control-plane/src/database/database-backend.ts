import type { PGlite } from '@electric-sql/pglite';
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import type {
  SqlDriverAdapter,
  SqlMigrationAwareDriverAdapterFactory,
} from '@prisma/driver-adapter-utils';
import { DEFAULT_POOL_SIZE, type DatabaseConfig } from './database-config.js';
import { EmbeddedAdapterFactory, openEmbeddedDatabase } from './embedded-database.js';
import { WholeScriptAdapter } from './whole-script-adapter.js';

/**
 * The name under which a statement is prepared once per connection and then only bound and
 * executed, for the statements that begin with a `/* prepared:<name> *\/` comment; '' (run
 * unnamed, parsed and planned at every execution) for the rest. Kept for the few statements
 * whose planning showed inside createShard's team lock: a named statement stays prepared on
 * its connection, which a transaction-mode pooler must support (PgBouncer 1.21 and later,
 * `max_prepared_statements`).
 */
export function preparedStatementName(sql: string): string {
  return /^\s*\/\* prepared:([a-z_]+) \*\//.exec(sql)?.[1] ?? '';
}

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
  /** Closes the client's pool (PostgreSQL) or the embedded database. */
  close(): Promise<void>;
}

/**
 * Opens the database. `onIdleClientError` hears the server ending one of the pool's idle
 * connections (a restart, `pg_terminate_backend`, `DROP DATABASE … WITH (FORCE)`); the pool
 * drops that connection and opens another when it needs one.
 */
export async function openDatabaseBackend(
  config: DatabaseConfig,
  onIdleClientError: (error: Error) => void = () => undefined,
): Promise<DatabaseBackend> {
  if (config.url !== undefined) {
    const url = config.url;
    // One pool for PrismaClient and DirectSql (each connects its own adapter to it), so the
    // configured pool size bounds both together.
    const pool = new pg.Pool({ connectionString: url, max: config.poolSize ?? DEFAULT_POOL_SIZE });
    // PrismaPg listens for these only while one of its adapters is connected; an 'error' that
    // nobody hears would take the whole process down (seen: a connection still closing after
    // close() when the test database was dropped WITH (FORCE)).
    pool.on('error', onIdleClientError);
    return {
      kind: 'postgres',
      clientAdapter: new PrismaPg(pool, {
        statementNameGenerator: (query) => preparedStatementName(query.sql),
      }),
      migrationAdapter: new PostgresMigrationAdapterFactory(
        new PrismaPg({ connectionString: url, max: 1 }),
      ),
      close: () => pool.end(),
    };
  }
  const embedded = await openEmbeddedDatabase(config.embeddedDataDir, {
    durable: config.embeddedDurable ?? true,
  });
  const adapter = new EmbeddedAdapterFactory(embedded.pglite);
  return {
    kind: 'pglite',
    clientAdapter: adapter,
    migrationAdapter: adapter,
    pglite: embedded.pglite,
    close: () => embedded.close(),
  };
}

/**
 * @prisma/adapter-pg for the schema engine, with two fixes:
 * - migration scripts run whole, in one implicit transaction (see WholeScriptAdapter);
 * - no shadow database: adapter-pg's keeps the connection string's database name, so the
 *   engine would replay migrations into the real database. Nothing here needs one on
 *   PostgreSQL (diffs run on in-memory PGlite), so asking for one is a bug.
 */
class PostgresMigrationAdapterFactory implements SqlMigrationAwareDriverAdapterFactory {
  readonly provider = 'postgres';
  readonly adapterName: string;

  constructor(private readonly inner: PrismaPg) {
    this.adapterName = inner.adapterName;
  }

  async connect(): Promise<SqlDriverAdapter> {
    const adapter = await this.inner.connect();
    // A query without parameters goes over the simple protocol, which allows many statements.
    const runScript = (script: string) => adapter.underlyingDriver().query(script);
    return new WholeScriptAdapter(adapter, runScript, async () => {});
  }

  connectToShadowDb(): Promise<SqlDriverAdapter> {
    return Promise.reject(
      new Error('no shadow database on PostgreSQL here: diff against in-memory PGlite instead'),
    );
  }
}

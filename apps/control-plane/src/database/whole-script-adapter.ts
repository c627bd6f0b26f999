import {
  DriverAdapterError,
  type IsolationLevel,
  type SqlDriverAdapter,
  type SqlQuery,
  type SqlResultSet,
  type Transaction,
} from '@prisma/driver-adapter-utils';

/**
 * A driver adapter whose executeScript (how the schema engine runs a migration.sql) sends
 * the whole script as one simple-protocol query, as the native engine does: PostgreSQL then
 * runs all of its statements in one implicit transaction, so a failing migration leaves
 * nothing half-applied. The published adapters do not: pglite-prisma-adapter 0.7.2 did not
 * even wait for the script, and @prisma/adapter-pg 7.10 splits it at every ";" (also inside
 * strings and function bodies) and runs the pieces one by one. Everything else is delegated.
 */
export class WholeScriptAdapter implements SqlDriverAdapter {
  readonly provider: SqlDriverAdapter['provider'];
  readonly adapterName: string;

  constructor(
    private readonly inner: SqlDriverAdapter,
    private readonly runScript: (script: string) => Promise<unknown>,
    private readonly release: () => Promise<void>,
  ) {
    this.provider = inner.provider;
    this.adapterName = inner.adapterName;
  }

  queryRaw(query: SqlQuery): Promise<SqlResultSet> {
    return this.inner.queryRaw(query);
  }

  executeRaw(query: SqlQuery): Promise<number> {
    return this.inner.executeRaw(query);
  }

  async executeScript(script: string): Promise<void> {
    try {
      await this.runScript(script);
    } catch (error) {
      throw toDriverAdapterError(error);
    }
  }

  startTransaction(isolationLevel?: IsolationLevel): Promise<Transaction> {
    return this.inner.startTransaction(isolationLevel);
  }

  getConnectionInfo() {
    return this.inner.getConnectionInfo?.() ?? { supportsRelationJoins: true };
  }

  async dispose(): Promise<void> {
    await this.inner.dispose();
    await this.release();
  }
}

/** The fields of a PostgreSQL error, as both pg and PGlite report them. */
interface PostgresErrorFields {
  code: string;
  severity?: string;
  message: string;
  detail?: string;
  column?: string;
  hint?: string;
}

function isPostgresError(error: unknown): error is PostgresErrorFields {
  const fields = error as Partial<PostgresErrorFields> | null;
  return typeof fields?.code === 'string' && typeof fields.message === 'string';
}

/** The shape Prisma's engines expect, so that PostgreSQL's message reaches the caller. */
function toDriverAdapterError(error: unknown): unknown {
  if (!isPostgresError(error)) return error;
  return new DriverAdapterError({
    kind: 'postgres',
    code: error.code,
    severity: error.severity ?? 'ERROR',
    message: error.message,
    detail: error.detail,
    column: error.column,
    hint: error.hint,
    originalCode: error.code,
    originalMessage: error.message,
  });
}

import type {
  ArgScalarType,
  ArgType,
  SqlDriverAdapter,
  SqlQueryable,
  SqlResultSet,
  Transaction,
} from '@prisma/driver-adapter-utils';
import { ColumnTypeEnum, type ColumnType } from '@prisma/driver-adapter-utils';
import { Prisma } from './generated/client.js';

/**
 * What the hot paths' statements need of a database handle: Prisma's tagged-template raw
 * queries. PrismaClient and its transaction clients have it, and so does DirectSql, so a
 * statement function typed with RawSql runs on either.
 */
export interface RawSql {
  $queryRaw<T = unknown>(
    query: TemplateStringsArray | Prisma.Sql,
    ...values: unknown[]
  ): Promise<T>;
  $executeRaw(query: TemplateStringsArray | Prisma.Sql, ...values: unknown[]): Promise<number>;
}

export interface DirectTransactionOptions {
  /** How long to wait for a pooled connection (Prisma's maxWait); then P2028. */
  readonly maxWait?: number;
  /** How long the transaction may run (Prisma's timeout); past it, it rolls back (P2028). */
  readonly timeout?: number;
}

/** Prisma's interactive-transaction defaults. */
const DEFAULT_MAX_WAIT_MS = 2_000;
const DEFAULT_TIMEOUT_MS = 5_000;

/**
 * Raw SQL straight on the driver adapter that PrismaClient uses (the same pool on PostgreSQL,
 * the same PGlite), without the client's query interpreter and transaction manager, which
 * cost about three times the CPU of the statement itself (bench/control-plane/raw-sql.mjs:
 * 187 against 68 µs per statement, 870 against 309 µs for a transaction of three). For the statements run per createShard and per agent message;
 * everything else stays on PrismaClient.
 *
 * Parameters, results and errors follow `$queryRaw` exactly, so a statement gives the same
 * rows either way (`direct-sql.test.ts` compares them on both databases): bigint columns as
 * bigint, timestamps as Date, json parsed, numeric as Prisma.Decimal; a failed statement
 * throws an error whose `meta.driverAdapterError` carries PostgreSQL's SQLSTATE, which
 * database-errors.ts reads. Columns of type bytes are refused (nothing here reads them).
 */
export class DirectSql implements RawSql {
  constructor(private readonly adapter: () => Promise<SqlDriverAdapter>) {}

  async $queryRaw<T = unknown>(
    query: TemplateStringsArray | Prisma.Sql,
    ...values: unknown[]
  ): Promise<T> {
    return queryOn(await this.adapter(), sqlOf(query, values)) as T;
  }

  async $executeRaw(
    query: TemplateStringsArray | Prisma.Sql,
    ...values: unknown[]
  ): Promise<number> {
    return executeOn(await this.adapter(), sqlOf(query, values));
  }

  /**
   * Runs `work` in one transaction (READ COMMITTED) and commits, or rolls back and rethrows.
   * Like Prisma's `$transaction(async (tx) => ...)`: use only `tx` inside (on PGlite a
   * statement outside it waits for the transaction, which waits for the statement).
   */
  async transaction<T>(
    work: (tx: RawSql) => Promise<T>,
    options: DirectTransactionOptions = {},
  ): Promise<T> {
    const adapter = await this.adapter();
    const transaction = await startWithin(adapter, options.maxWait ?? DEFAULT_MAX_WAIT_MS);
    const session = new DirectTransaction(transaction, options.timeout ?? DEFAULT_TIMEOUT_MS);
    let result: T;
    try {
      result = await work(session);
      session.checkOpen();
    } catch (error) {
      await session.close('ROLLBACK').catch(() => undefined);
      throw error;
    }
    await session.close('COMMIT');
    return result;
  }
}

class DirectTransaction implements RawSql {
  private expired = false;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly transaction: Transaction,
    private readonly timeoutMs: number,
  ) {
    this.timer = setTimeout(() => (this.expired = true), timeoutMs);
  }

  async $queryRaw<T = unknown>(
    query: TemplateStringsArray | Prisma.Sql,
    ...values: unknown[]
  ): Promise<T> {
    this.checkOpen();
    return queryOn(this.transaction, sqlOf(query, values)) as T;
  }

  async $executeRaw(
    query: TemplateStringsArray | Prisma.Sql,
    ...values: unknown[]
  ): Promise<number> {
    this.checkOpen();
    return executeOn(this.transaction, sqlOf(query, values));
  }

  checkOpen(): void {
    if (this.expired) {
      throw new DirectSqlError(
        `Transaction ran past its timeout of ${this.timeoutMs} ms and was rolled back`,
        'P2028',
      );
    }
  }

  /** Ends the transaction the way Prisma's transaction manager does, per adapter. */
  async close(verdict: 'COMMIT' | 'ROLLBACK'): Promise<void> {
    clearTimeout(this.timer);
    const { transaction } = this;
    if (transaction.options.usePhantomQuery) {
      // PGlite: the adapter's transaction() call commits or rolls back itself.
      await (verdict === 'COMMIT' ? transaction.commit() : transaction.rollback());
      return;
    }
    if (verdict === 'ROLLBACK') {
      try {
        await executeOn(transaction, { sql: 'ROLLBACK', args: [], argTypes: [] });
      } finally {
        await transaction.rollback();
      }
      return;
    }
    try {
      await executeOn(transaction, { sql: 'COMMIT', args: [], argTypes: [] });
    } catch (error) {
      await transaction.rollback();
      throw error;
    }
    await transaction.commit();
  }
}

/** startTransaction, given up after `maxWait` ms (a late start is rolled back at once). */
async function startWithin(adapter: SqlDriverAdapter, maxWait: number): Promise<Transaction> {
  const starting = adapter.startTransaction().catch((error: unknown) => {
    throw asDirectSqlError(error);
  });
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(
        new DirectSqlError(
          `Transaction could not start within ${maxWait} ms (no database connection free)`,
          'P2028',
        ),
      );
      void starting
        .then((late) => new DirectTransaction(late, 0).close('ROLLBACK'))
        .catch(() => undefined);
    }, maxWait);
  });
  try {
    return await Promise.race([starting, gaveUp]);
  } finally {
    clearTimeout(timer);
  }
}

interface SqlStatement {
  readonly sql: string;
  readonly args: unknown[];
  readonly argTypes: ArgType[];
}

function sqlOf(query: TemplateStringsArray | Prisma.Sql, values: unknown[]): SqlStatement {
  const sql = query instanceof Prisma.Sql ? query : new Prisma.Sql(query, values);
  const args: unknown[] = [];
  const argTypes: ArgType[] = [];
  for (const value of sql.values) {
    const [arg, argType] = encodeArg(value);
    args.push(arg);
    argTypes.push(argType);
  }
  return { sql: sql.text, args, argTypes };
}

/**
 * A parameter as Prisma hands it to the adapter (its raw parameters are JSON with typed
 * values): bigint and Decimal as text, dates as dates, bytes as bytes, objects as JSON text,
 * arrays element by element, typed by their first element.
 */
function encodeArg(value: unknown): [unknown, ArgType] {
  if (Array.isArray(value)) {
    const items = value.map((item) => encodeScalar(item));
    const first = items[0];
    return [
      items.map(([arg]) => arg),
      { scalarType: first === undefined ? 'unknown' : first[1], arity: 'list' },
    ];
  }
  const [arg, scalarType] = encodeScalar(value);
  return [arg, { scalarType, arity: 'scalar' }];
}

function encodeScalar(value: unknown): [unknown, ArgScalarType] {
  if (value === null || value === undefined) return [null, 'unknown'];
  if (Array.isArray(value)) return [value.map((item) => encodeScalar(item)[0]), 'unknown'];
  if (typeof value === 'bigint') return [value.toString(), 'bigint'];
  if (typeof value === 'number') return [value, 'decimal'];
  if (typeof value === 'string') return [value, 'string'];
  if (typeof value === 'boolean') return [value, 'unknown'];
  if (value instanceof Date) return [value, 'datetime'];
  if (ArrayBuffer.isView(value)) return [value, 'bytes'];
  if (Prisma.Decimal.isDecimal(value)) return [value.toString(), 'decimal'];
  return [JSON.stringify(value), 'unknown'];
}

async function queryOn(
  queryable: SqlQueryable,
  statement: SqlStatement,
): Promise<Record<string, unknown>[]> {
  let resultSet: SqlResultSet;
  try {
    resultSet = await queryable.queryRaw(statement);
  } catch (error) {
    throw asDirectSqlError(error);
  }
  return rowsOf(resultSet);
}

async function executeOn(queryable: SqlQueryable, statement: SqlStatement): Promise<number> {
  try {
    return await queryable.executeRaw(statement);
  } catch (error) {
    throw asDirectSqlError(error);
  }
}

/** The rows as `$queryRaw` gives them: objects by column name, values decoded by column type. */
function rowsOf({ columnNames, columnTypes, rows }: SqlResultSet): Record<string, unknown>[] {
  const decoders = columnTypes.map((type, index) => decoderOf(type, columnNames[index]!));
  return rows.map((row) => {
    const record: Record<string, unknown> = {};
    for (let i = 0; i < columnNames.length; i++) {
      const value = row[i];
      record[columnNames[i]!] = value === null ? null : decoders[i]!(value);
    }
    return record;
  });
}

type Decoder = (value: unknown) => unknown;

const asIs: Decoder = (value) => value;
const int32: Decoder = (value) => Math.trunc(typeof value === 'number' ? value : Number(value));
const int64: Decoder = (value) =>
  typeof value === 'number' ? BigInt(Math.trunc(value)) : BigInt(value as string);
const json: Decoder = (value) => JSON.parse(value as string);
const boolean: Decoder = (value) =>
  typeof value === 'boolean' ? value : value === 'true' || value === '1' || value === 1;
const decimal: Decoder = (value) => new Prisma.Decimal(value as string);
const date: Decoder = (value) => new Date(value as string);
const time: Decoder = (value) => new Date(`1970-01-01T${value as string}Z`);
const each =
  (decode: Decoder): Decoder =>
  (value) =>
    (value as unknown[]).map((item) => (item === null ? null : decode(item)));

function decoderOf(type: ColumnType, column: string): Decoder {
  switch (type) {
    case ColumnTypeEnum.Int32:
      return int32;
    case ColumnTypeEnum.Int64:
      return int64;
    case ColumnTypeEnum.Json:
      return json;
    case ColumnTypeEnum.Boolean:
      return boolean;
    case ColumnTypeEnum.Numeric:
      return decimal;
    case ColumnTypeEnum.DateTime:
    case ColumnTypeEnum.Date:
      return date;
    case ColumnTypeEnum.Time:
      return time;
    case ColumnTypeEnum.Int32Array:
      return each(int32);
    case ColumnTypeEnum.Int64Array:
      return each(int64);
    case ColumnTypeEnum.JsonArray:
      return each(json);
    case ColumnTypeEnum.BooleanArray:
      return each(boolean);
    case ColumnTypeEnum.NumericArray:
      return each(decimal);
    case ColumnTypeEnum.DateTimeArray:
    case ColumnTypeEnum.DateArray:
      return each(date);
    case ColumnTypeEnum.TimeArray:
      return each(time);
    case ColumnTypeEnum.Bytes:
    case ColumnTypeEnum.BytesArray:
      return () => {
        throw new Error(
          `DirectSql does not read bytes columns (column "${column}"): use $queryRaw`,
        );
      };
    case ColumnTypeEnum.Float:
    case ColumnTypeEnum.Double:
    case ColumnTypeEnum.Text:
    case ColumnTypeEnum.Enum:
    case ColumnTypeEnum.Character:
    case ColumnTypeEnum.Uuid:
    case ColumnTypeEnum.UnknownNumber:
    case ColumnTypeEnum.Set:
    case ColumnTypeEnum.FloatArray:
    case ColumnTypeEnum.DoubleArray:
    case ColumnTypeEnum.TextArray:
    case ColumnTypeEnum.EnumArray:
    case ColumnTypeEnum.CharacterArray:
    case ColumnTypeEnum.UuidArray:
      return asIs;
    default:
      return assertNever(type);
  }
}

function assertNever(type: never): never {
  throw new Error(`DirectSql: unknown column type ${String(type)}`);
}

/**
 * A failed statement or transaction, shaped like Prisma's raw-query error (`code`, and the
 * adapter's error under `meta.driverAdapterError`) so that database-errors.ts reads both.
 */
export class DirectSqlError extends Error {
  readonly meta: { driverAdapterError?: unknown } | undefined;

  constructor(
    message: string,
    readonly code: string,
    driverAdapterError?: unknown,
  ) {
    super(message);
    this.name = 'DirectSqlError';
    this.meta = driverAdapterError === undefined ? undefined : { driverAdapterError };
  }
}

function asDirectSqlError(error: unknown): unknown {
  if (error instanceof DirectSqlError) return error;
  const isAdapterError =
    typeof error === 'object' && error !== null && (error as Error).name === 'DriverAdapterError';
  if (!isAdapterError) return error;
  const cause = (error as { cause?: { originalMessage?: string; message?: string } }).cause;
  const message = cause?.originalMessage ?? cause?.message ?? (error as Error).message;
  return new DirectSqlError(`Raw query failed: ${message}`, 'P2010', error);
}

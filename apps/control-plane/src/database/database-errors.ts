/*
 * Reading PostgreSQL's verdict out of Prisma's errors, the same way on both backends: the
 * driver adapter's error (with PostgreSQL's SQLSTATE) rides in `meta.driverAdapterError`.
 */

interface AdapterErrorCause {
  originalCode?: string;
  originalMessage?: string;
  code?: string;
  message?: string;
}

function adapterCause(error: unknown): AdapterErrorCause | undefined {
  const meta = (error as { meta?: { driverAdapterError?: { cause?: unknown } } } | null)?.meta;
  const cause = meta?.driverAdapterError?.cause;
  return typeof cause === 'object' && cause !== null ? (cause as AdapterErrorCause) : undefined;
}

/** PostgreSQL's SQLSTATE behind a Prisma error (e.g. "23514"), if it came from the database. */
export function postgresErrorCode(error: unknown): string | undefined {
  const cause = adapterCause(error);
  return cause?.originalCode ?? cause?.code;
}

/**
 * The name of the CHECK constraint a write violated (e.g. "gpu_reserved_within_capacity"),
 * or undefined when `error` is something else.
 */
export function violatedCheckConstraint(error: unknown): string | undefined {
  if (postgresErrorCode(error) !== '23514') return undefined;
  const cause = adapterCause(error);
  const message = cause?.originalMessage ?? cause?.message ?? '';
  return /check constraint "([^"]+)"/.exec(message)?.[1] ?? '';
}

/**
 * The request never reached the database: no pooled connection came within the pool's wait
 * (Prisma's P2024), or an interactive transaction could not start within its maxWait (P2028).
 * Nothing was written, so the request may simply be sent again.
 */
export function isDatabaseBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === 'P2024' || code === 'P2028';
}

/** A unique index or primary key refused the write (Prisma's P2002). */
export function isUniqueViolation(error: unknown): boolean {
  return (
    (error as { code?: unknown } | null)?.code === 'P2002' || postgresErrorCode(error) === '23505'
  );
}

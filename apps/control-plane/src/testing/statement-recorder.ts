import pg from 'pg';
import type { PrismaService } from '../database/index.js';

/**
 * Records the SQL text of every statement the control plane in this process sends while it
 * runs, on either backend: PostgreSQL through pg's Client.query (what @prisma/adapter-pg calls),
 * PGlite through the open instance's query. For tests that count queries (DataLoader batching).
 * Statements inside PGlite transactions go through the transaction object and are not seen.
 */
export async function recordStatements<T>(
  prisma: PrismaService,
  run: () => Promise<T>,
): Promise<{ result: T; statements: string[] }> {
  const statements: string[] = [];
  const textOf = (query: unknown): string =>
    typeof query === 'string'
      ? query
      : String((query as { text?: unknown } | null | undefined)?.text ?? '');
  const backend = await prisma.backend();
  let restore: () => void;
  if (backend.pglite !== undefined) {
    const pglite = backend.pglite;
    const own = Object.getOwnPropertyDescriptor(pglite, 'query');
    const original = pglite.query.bind(pglite);
    pglite.query = ((query: string, ...rest: unknown[]) => {
      statements.push(textOf(query));
      return (original as (...args: unknown[]) => unknown)(query, ...rest);
    }) as typeof pglite.query;
    restore = () => {
      if (own === undefined) delete (pglite as { query?: unknown }).query;
      else Object.defineProperty(pglite, 'query', own);
    };
  } else {
    const prototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
    const original = prototype.query;
    prototype.query = function (this: unknown, query: unknown, ...rest: unknown[]) {
      statements.push(textOf(query));
      return original.call(this, query, ...rest);
    };
    restore = () => {
      prototype.query = original;
    };
  }
  try {
    return { result: await run(), statements };
  } finally {
    restore();
  }
}

/** The statements that read `table` (Prisma writes `FROM "public"."table"`; raw SQL `FROM table`). */
export function readsOf(statements: readonly string[], table: string): string[] {
  const pattern = new RegExp(`\\bFROM\\s+(?:"public"\\.)?"?${table}"?(?![\\w"])`, 'i');
  return statements.filter((sql) => pattern.test(sql));
}

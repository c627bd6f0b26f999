import type { Type } from '@nestjs/common';
import { ArgsType, Field, Int, ObjectType } from '@nestjs/graphql';
import { BadUserInputError } from '../errors/domain-errors.js';

/**
 * Relay-style connections (edges / node / cursor / pageInfo, `first` + `after`) for every list.
 * A cursor is the opaque base64url form of the row's sort key: a unique, ordered string column
 * chosen by the service (a team's name, a token's id). Pages are keyset queries
 * (`key > after ORDER BY key LIMIT first + 1`), so they stay stable under concurrent inserts.
 */

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 500;

@ArgsType()
export class ConnectionArgs {
  @Field(() => Int, {
    nullable: true,
    description: `How many items, 1 to ${MAX_PAGE_SIZE} (default ${DEFAULT_PAGE_SIZE}).`,
  })
  first?: number | null;

  @Field(() => String, { nullable: true, description: 'The endCursor of the previous page.' })
  after?: string | null;
}

@ObjectType()
export class PageInfo {
  @Field()
  hasNextPage!: boolean;

  @Field({ description: 'True when this page was asked for with `after`.' })
  hasPreviousPage!: boolean;

  @Field(() => String, { nullable: true })
  startCursor!: string | null;

  @Field(() => String, { nullable: true })
  endCursor!: string | null;
}

export interface Edge<T> {
  readonly cursor: string;
  readonly node: T;
}

export interface ConnectionShape<T> {
  readonly edges: readonly Edge<T>[];
  readonly pageInfo: PageInfo;
}

/**
 * Base class of a connection type. Use as
 * `@ObjectType() export class TeamConnection extends Connection(Team) {}`.
 */
export function Connection<T>(nodeType: Type<T>): Type<ConnectionShape<T>> {
  @ObjectType(`${nodeType.name}Edge`)
  class EdgeType implements Edge<T> {
    @Field(() => String)
    cursor!: string;

    @Field(() => nodeType)
    node!: T;
  }

  @ObjectType({ isAbstract: true })
  class ConnectionType implements ConnectionShape<T> {
    @Field(() => [EdgeType])
    edges!: Edge<T>[];

    @Field(() => PageInfo)
    pageInfo!: PageInfo;
  }
  return ConnectionType;
}

export interface PageRequest {
  /** Rows to fetch: one more than the page size, to learn whether another page follows. */
  readonly take: number;
  /** Only rows whose sort key is greater than this. */
  readonly afterKey: string | undefined;
}

export function encodeCursor(key: string): string {
  return Buffer.from(key, 'utf8').toString('base64url');
}

export function decodeCursor(cursor: string): string {
  const key = Buffer.from(cursor, 'base64url').toString('utf8');
  if (cursor === '' || encodeCursor(key) !== cursor) {
    throw BadUserInputError.of('after', 'is not a cursor returned by this API');
  }
  return key;
}

/** Validates first/after and says what to fetch; checked before any query runs. */
export function pageRequest(args: ConnectionArgs): PageRequest {
  const first = args.first ?? DEFAULT_PAGE_SIZE;
  if (!Number.isInteger(first) || first < 1 || first > MAX_PAGE_SIZE) {
    throw BadUserInputError.of('first', `must be from 1 to ${MAX_PAGE_SIZE}, got ${first}`);
  }
  const afterKey = typeof args.after === 'string' ? decodeCursor(args.after) : undefined;
  return { take: first + 1, afterKey };
}

/** Turns the rows fetched for `request` (sorted by key, at most request.take) into a page. */
export function toConnection<T>(
  request: PageRequest,
  rows: readonly T[],
  sortKey: (row: T) => string,
): ConnectionShape<T> {
  const page = rows.slice(0, request.take - 1);
  const edges = page.map((node) => ({ cursor: encodeCursor(sortKey(node)), node }));
  return {
    edges,
    pageInfo: {
      hasNextPage: rows.length > page.length,
      hasPreviousPage: request.afterKey !== undefined,
      startCursor: edges[0]?.cursor ?? null,
      endCursor: edges.at(-1)?.cursor ?? null,
    },
  };
}

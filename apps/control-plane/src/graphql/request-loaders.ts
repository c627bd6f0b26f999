import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import { GqlExecutionContext } from '@nestjs/graphql';
import DataLoader from 'dataloader';
import type { GraphQLResolveInfo } from 'graphql';
import type { RequestContext } from '../auth/request-context.js';

/**
 * How to load many keys in one query: `loadMany` answers a map (keys are distinct); a key it
 * leaves out gets `missing(key)` (a value, or an Error that rejects that key's load only).
 * Defined once per service; RequestLoaders gives each request its own DataLoader for it.
 */
export interface BatchLoad<K, V> {
  readonly loadMany: (keys: readonly K[]) => Promise<ReadonlyMap<K, V>>;
  readonly missing: (key: K) => V | Error;
}

/**
 * The DataLoaders of one scope (a query; one mutation field; one subscription event): loads of
 * the same kind made while GraphQL resolves a list (Shard.team for 500 shards) become one
 * query, and a key asked twice is loaded once. Nothing is shared between requests, so a
 * caller never reads what another caller's request loaded; callers authorize keys before
 * loading them.
 */
export class RequestLoaders {
  /** By batch definition; the definition's types are its loader's. */
  private readonly loaders = new Map<object, DataLoader<unknown, unknown>>();

  load<K, V>(batch: BatchLoad<K, V>, key: K): Promise<V> {
    let loader = this.loaders.get(batch) as DataLoader<K, V> | undefined;
    if (loader === undefined) {
      loader = new DataLoader<K, V>(
        async (keys) => {
          const values = await batch.loadMany(keys);
          return keys.map((key) => (values.has(key) ? (values.get(key) as V) : batch.missing(key)));
        },
        // A whole event-loop turn, not DataLoader's default (the end of the microtask queue):
        // Nest runs guards before each field resolver, so the loads of one list may be a few
        // promise jobs apart.
        { batchScheduleFn: (dispatch) => setImmediate(dispatch) },
      );
      this.loaders.set(batch, loader as DataLoader<unknown, unknown>);
    }
    return loader.load(key);
  }
}

interface LoaderScopes {
  readonly byField: Map<string, RequestLoaders>;
  readonly byEvent: WeakMap<object, RequestLoaders>;
}

const SCOPES = Symbol('loaderScopes');

/**
 * The loaders for the field being resolved. A query is one scope. Each mutation field is its
 * own (a later mutation of the request may change what an earlier one loaded), and so is each
 * event of a subscription (its rootValue): a long subscription never serves stale rows.
 */
export function loadersFor(context: RequestContext, info: GraphQLResolveInfo): RequestLoaders {
  const holder = context as RequestContext & { [SCOPES]?: LoaderScopes };
  const scopes = (holder[SCOPES] ??= { byField: new Map(), byEvent: new WeakMap() });
  const event: unknown = info.rootValue;
  if (info.operation.operation === 'subscription' && typeof event === 'object' && event !== null) {
    let loaders = scopes.byEvent.get(event);
    if (loaders === undefined) scopes.byEvent.set(event, (loaders = new RequestLoaders()));
    return loaders;
  }
  const scope = info.operation.operation === 'mutation' ? `m:${rootFieldOf(info)}` : 'q';
  let loaders = scopes.byField.get(scope);
  if (loaders === undefined) scopes.byField.set(scope, (loaders = new RequestLoaders()));
  return loaders;
}

function rootFieldOf(info: GraphQLResolveInfo): string | number {
  let path = info.path;
  while (path.prev !== undefined) path = path.prev;
  return path.key;
}

/** The RequestLoaders of the field being resolved (see loadersFor). */
export const Loaders = createParamDecorator(
  (_: unknown, context: ExecutionContext): RequestLoaders => {
    const graphql = GqlExecutionContext.create(context);
    return loadersFor(graphql.getContext<RequestContext>(), graphql.getInfo<GraphQLResolveInfo>());
  },
);

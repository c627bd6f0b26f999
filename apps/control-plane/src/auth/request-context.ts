import type { TokenRecord } from './auth.service.js';
import type { Caller } from './caller.js';

/**
 * Per-request state shared by GraphQL resolvers (it is the GraphQL context) and the guard. The
 * Authorization value comes from the HTTP header, or from graphql-ws connection parameters.
 */
export interface RequestContext {
  authorization?: string | undefined;
  /** Set once the guard authenticated the request; reused by later resolvers of the request. */
  caller?: Caller;
  /** The token's row, when authenticating this request read it (its caller was not cached). */
  token?: TokenRecord;
}

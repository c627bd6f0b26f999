import type { ApolloServerPlugin, GraphQLRequestListener } from '@apollo/server';
import { Kind, visit, type DocumentNode } from 'graphql';
import type { AuthService } from '../auth/auth.service.js';
import { Role } from '../auth/caller.js';
import type { RequestContext } from '../auth/request-context.js';
import type { SecurityConfig } from '../config/api-limits.js';
import { TimeoutError, UnauthenticatedError } from '../errors/domain-errors.js';
import { checkCost, QueryCostCache } from './query-limits.js';
import { TokenRateLimiter } from './token-rate-limiter.js';

/** Whether the document asks for `__schema` or `__type` (`__typename` is not introspection). */
export function asksForIntrospection(document: DocumentNode): boolean {
  let found = false;
  visit(document, {
    Field(node) {
      if (node.name.value === '__schema' || node.name.value === '__type') found = true;
    },
    [Kind.FRAGMENT_DEFINITION]: { enter: () => (found ? false : undefined) },
  });
  return found;
}

/**
 * Runs once the operation is known, before it executes: authenticates (AuthGuard reuses the
 * caller), refuses introspection without a token unless publicIntrospection, admits the
 * request through the token's rate and concurrency limits (RATE_LIMITED), and refuses an
 * operation whose cost is over the caller's role budget (QUERY_TOO_COMPLEX). Queries run
 * under a time budget: past it the answer is TIMEOUT (no partial data); mutations are not cut
 * short (what they wrote is reported).
 */
export function requestGuardPlugin(
  auth: AuthService,
  security: SecurityConfig,
  limiter: TokenRateLimiter = new TokenRateLimiter(security.limits),
): ApolloServerPlugin<RequestContext> {
  const { limits } = security;
  const costs = new QueryCostCache(limits.maxNodes);
  return {
    async requestDidStart(): Promise<GraphQLRequestListener<RequestContext>> {
      let release: (() => void) | undefined;
      let timer: NodeJS.Timeout | undefined;
      let timedOut = false;
      return {
        async didResolveOperation({
          contextValue,
          document,
          schema,
          request,
          operationName,
          operation,
        }) {
          const context = contextValue;
          if (context.authorization !== undefined) await auth.authenticateRequest(context);
          const caller = context.caller;
          if (
            caller === undefined &&
            !security.publicIntrospection &&
            asksForIntrospection(document)
          ) {
            throw new UnauthenticatedError(
              'introspection needs a token (send "Authorization: Bearer gps_..."); the operator may open it with GPUSHARDS_PUBLIC_INTROSPECTION=true',
            );
          }
          if (caller !== undefined) release = limiter.admit(caller.tokenId, caller.limits);
          const role = caller?.role ?? Role.VIEWER;
          const cost = costs.cost(
            schema,
            document,
            request.variables ?? {},
            operationName ?? undefined,
          );
          checkCost(cost, limits.costBudget[role], role);
          if (operation?.operation === 'query') {
            timer = setTimeout(() => {
              timedOut = true;
            }, limits.requestTimeoutMs);
            timer.unref();
          }
        },
        async executionDidStart() {
          if (timer === undefined) return;
          return {
            willResolveField() {
              if (timedOut) throw new TimeoutError(limits.requestTimeoutMs);
            },
          };
        },
        async willSendResponse({ response }) {
          release?.();
          clearTimeout(timer);
          if (timedOut && response.body.kind === 'single') {
            const error = new TimeoutError(limits.requestTimeoutMs);
            response.body.singleResult = {
              errors: [
                { message: error.message, extensions: { ...error.extensions, code: error.code } },
              ],
            };
            response.http.status = 503;
          }
        },
      };
    },
  };
}

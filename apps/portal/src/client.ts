import { createClient as createWsClient } from 'graphql-ws';
import { Client, fetchExchange, subscriptionExchange, cacheExchange } from 'urql';
import { authorizationOf } from './session.js';

/**
 * One urql client per signed-in token, or per browser session (`token` null: the session's
 * cookie, HttpOnly, goes with every request and WebSocket of this origin by itself): HTTP for
 * queries and mutations, graphql-ws for events.
 */
export function createApiClient(token: string | null): { client: Client; close: () => void } {
  const authorization = token === null ? undefined : authorizationOf(token);
  const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/graphql`;
  const ws = createWsClient({
    url: wsUrl,
    connectionParams: authorization === undefined ? {} : { Authorization: authorization },
    lazy: true,
    retryAttempts: 20,
  });
  const client = new Client({
    url: '/graphql',
    preferGetMethod: false,
    requestPolicy: 'cache-and-network',
    fetchOptions: (): RequestInit => ({
      credentials: 'same-origin',
      ...(authorization === undefined ? {} : { headers: { authorization } }),
    }),
    exchanges: [
      cacheExchange,
      fetchExchange,
      subscriptionExchange({
        forwardSubscription(request) {
          const input = { ...request, query: request.query ?? '' };
          return {
            subscribe(sink) {
              const unsubscribe = ws.subscribe(input, sink);
              return { unsubscribe };
            },
          };
        },
      }),
    ],
  });
  return { client, close: () => void ws.dispose() };
}

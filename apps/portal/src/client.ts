import { createClient as createWsClient } from 'graphql-ws';
import { Client, fetchExchange, subscriptionExchange, cacheExchange } from 'urql';
import { authorizationOf } from './session.js';

/** One urql client per signed-in token: HTTP for queries and mutations, graphql-ws for events. */
export function createApiClient(token: string): { client: Client; close: () => void } {
  const authorization = authorizationOf(token);
  const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/graphql`;
  const ws = createWsClient({
    url: wsUrl,
    connectionParams: { Authorization: authorization },
    lazy: true,
    retryAttempts: 20,
  });
  const client = new Client({
    url: '/graphql',
    preferGetMethod: false,
    requestPolicy: 'cache-and-network',
    fetchOptions: () => ({ headers: { authorization } }),
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

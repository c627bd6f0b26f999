import { ApolloServerPluginCacheControlDisabled } from '@apollo/server/plugin/disabled';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import { GraphQLModule } from '@nestjs/graphql';
import {
  GraphQLError,
  specifiedRules,
  validate,
  type DocumentNode,
  type GraphQLSchema,
} from 'graphql';
import { DomainError } from '../errors/domain-errors.js';
import { AuthService } from '../auth/auth.service.js';
import type { RequestContext } from '../auth/request-context.js';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { createErrorFormatter } from '../errors/format-error.js';
import { sessionAuthorization } from '../identity/session-cookie.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { earlyQueryLimitsRule } from './query-limits.js';
import { requestGuardPlugin } from './request-guard.plugin.js';

export const GRAPHQL_PATH = '/graphql';

/**
 * What `context` is called with: over HTTP, the Fastify request itself (@as-integrations/fastify
 * calls `context(request, reply)`); over graphql-ws (subscriptions), an object with the
 * connection parameters.
 */
type TransportContext =
  | { readonly headers: UpgradeHeaders }
  | {
      readonly connectionParams?: Readonly<Record<string, unknown>>;
      readonly extra?: { readonly request?: { readonly headers: UpgradeHeaders } };
    };

interface UpgradeHeaders {
  readonly authorization?: string | undefined;
  readonly cookie?: string | undefined;
  readonly origin?: string | undefined;
}

/**
 * A WebSocket's credential: the token in its connection parameters, else the session cookie of
 * a person signed in, when the socket was opened by a page of the portal's own origin (another
 * site's page would send the cookie too).
 */
function websocketAuthorization(
  connectionParams: Readonly<Record<string, unknown>> | undefined,
  headers: UpgradeHeaders | undefined,
  config: ControlPlaneConfig,
): string | undefined {
  const token = authorizationOf(connectionParams);
  if (token !== undefined || config.identity === undefined) return token;
  return sessionAuthorization(headers?.cookie, {
    sent: headers?.origin,
    expected: config.identity.publicUrl.origin,
  });
}

/** graphql-ws clients send the token as connection parameter "Authorization" (or "authorization"). */
function authorizationOf(
  connectionParams: Readonly<Record<string, unknown>> | undefined,
): string | undefined {
  const value = connectionParams?.['Authorization'] ?? connectionParams?.['authorization'];
  return typeof value === 'string' ? value : undefined;
}

/**
 * The GraphQL API: code-first schema (sorted, kept in memory; docs/schema.graphql is written by
 * `schema-file.js write`), Apollo Server 5 on Fastify 5 (@as-integrations/fastify) at /graphql,
 * and graphql-ws on the same path (the HTTP server's upgrade) for subscriptions. Apollo's landing
 * page loads from a CDN, so it is off; GET /explorer serves the self-contained explorer instead (GET / the portal).
 */
@Module({
  imports: [
    GraphQLModule.forRootAsync<ApolloDriverConfig>({
      driver: ApolloDriver,
      inject: [LOGGER, AuthService, CONTROL_PLANE_CONFIG],
      useFactory: (
        logger: Logger,
        auth: AuthService,
        config: ControlPlaneConfig,
      ): ApolloDriverConfig => {
        const formatError = createErrorFormatter(logger.child({ module: 'graphql' }));
        const { limits, enforceLimits } = config.security;
        // Depth and aliases are refused on entering the document, before the other rules.
        const queryLimitsRule = earlyQueryLimitsRule(limits);
        // graphql-ws validates subscriptions itself: the same rules, the refusal as its errors.
        // (Nest's type leaves `validate` out; useServer takes it.)
        const wsValidation = {
          validate: (schema: GraphQLSchema, document: DocumentNode) =>
            validate(schema, document, [queryLimitsRule, ...specifiedRules]).map((error) => {
              if (!(error.originalError instanceof DomainError)) return error;
              const { http: _http, ...extensions } = error.originalError.extensions;
              return new GraphQLError(error.message, {
                extensions: { ...extensions, code: error.originalError.code },
              });
            }),
        };
        return {
          path: GRAPHQL_PATH,
          autoSchemaFile: true,
          sortSchema: true,
          graphiql: false,
          introspection: true,
          includeStacktraceInErrorResponses: false,
          autoTransformHttpErrors: false,
          formatError,
          // Apollo installs its cache-control plugin by default: a hook on every resolved field
          // for Cache-Control headers nothing here sets. Usage and schema reporting stay off
          // anyway without APOLLO_KEY.
          plugins: [
            ApolloServerPluginCacheControlDisabled(),
            ...(enforceLimits ? [requestGuardPlugin(auth, config.security)] : []),
          ],
          // graphql-js stops parsing past this many tokens (a 2 MiB body of aliases).
          ...(enforceLimits
            ? { parseOptions: { maxTokens: limits.maxTokens }, validationRules: [queryLimitsRule] }
            : {}),
          // A browser signed in through OpenID Connect sends its session cookie instead of a
          // token (SameSite=Lax: never from another site's page; and Apollo's CSRF prevention
          // refuses requests a form could send).
          context: (transport: TransportContext): RequestContext => ({
            authorization:
              'headers' in transport
                ? (transport.headers.authorization ??
                  (config.identity === undefined
                    ? undefined
                    : sessionAuthorization(transport.headers.cookie)))
                : websocketAuthorization(
                    transport.connectionParams,
                    transport.extra?.request?.headers,
                    config,
                  ),
          }),
          subscriptions: {
            'graphql-ws': {
              path: GRAPHQL_PATH,
              ...wsValidation,
              // Refuse the connection itself (close 4403) without a valid token or session; each
              // subscription is then checked again by AuthGuard like any query.
              onConnect: async ({ connectionParams, extra }) => {
                try {
                  const request = (extra as { request?: { headers: UpgradeHeaders } }).request;
                  await auth.authenticate(
                    websocketAuthorization(connectionParams, request?.headers, config),
                  );
                  return true;
                } catch {
                  return false;
                }
              },
              // Apollo's formatError does not see subscription results: the same formatter,
              // so subscription errors carry extensions.code and never leak internals.
              onNext: (_ctx, _id, _payload, _args, result) =>
                result.errors === undefined
                  ? undefined
                  : {
                      ...result,
                      errors: result.errors.map((error) => formatError(error.toJSON(), error)),
                    },
            },
          },
        };
      },
    }),
  ],
})
export class GraphqlApiModule {}

import { unwrapResolverError } from '@apollo/server/errors';
import { GraphQLError, type GraphQLFormattedError } from 'graphql';
import type { Logger } from '../logging/logger.js';
import { isDatabaseBusy } from '../database/database-errors.js';
import { DatabaseBusyError, DomainError } from './domain-errors.js';

export const INTERNAL_ERROR_MESSAGE = 'internal server error';

/**
 * Apollo's formatError: domain errors keep their message and code; errors that GraphQL itself
 * raised about the request (syntax, validation, variable coercion) keep theirs; everything
 * else (a bug, a database failure) is logged in full and reaches the client as a bare
 * INTERNAL_SERVER_ERROR, so stack traces and SQL never leave the server.
 */
export function createErrorFormatter(logger: Logger) {
  return (formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError => {
    const unwrapped = unwrapResolverError(error);
    // A DomainError thrown outside a resolver (a plugin, a validation rule) arrives wrapped.
    const domain =
      unwrapped instanceof GraphQLError && unwrapped.originalError instanceof DomainError
        ? unwrapped.originalError
        : unwrapped;
    // An overloaded database is an answer the caller can act on (retry), not a crash.
    const cause = isDatabaseBusy(domain) ? new DatabaseBusyError() : domain;
    if (cause !== domain) {
      logger.warn(
        { err: domain, path: formatted.path },
        'the database did not take a request in time',
      );
    }
    const where = {
      ...(formatted.locations ? { locations: formatted.locations } : {}),
      ...(formatted.path ? { path: formatted.path } : {}),
    };
    if (cause instanceof DomainError) {
      // `http` is for Apollo (status, Retry-After), not for the client's body.
      const { http: _http, ...extensions } = cause.extensions;
      return {
        message: cause.message,
        ...where,
        extensions: { ...extensions, code: cause.code },
      };
    }
    const code = formatted.extensions?.['code'];
    // graphql-js stops parsing past parseOptions.maxTokens with a syntax error; it is a size limit.
    const tokens = /^Syntax Error: Document contains more th\w+ (\d+) tokens/.exec(
      formatted.message,
    );
    if (tokens !== null) {
      const maximum = Number(tokens[1]);
      return {
        message: `query too complex: it has more than ${maximum} tokens, the limit is ${maximum}`,
        ...where,
        extensions: { code: 'QUERY_TOO_COMPLEX', limit: 'tokens', maximum, found: maximum + 1 },
      };
    }
    // Without a path the error is about the request as a whole, and written by graphql-js or
    // Apollo for the client; with one it escaped a resolver.
    const aboutTheRequest = formatted.path === undefined && error instanceof GraphQLError;
    if (aboutTheRequest && typeof code === 'string' && code !== 'INTERNAL_SERVER_ERROR') {
      return { message: formatted.message, ...where, extensions: { code } };
    }
    logger.error({ err: cause, path: formatted.path }, 'request failed unexpectedly');
    return {
      message: INTERNAL_ERROR_MESSAGE,
      ...where,
      extensions: { code: 'INTERNAL_SERVER_ERROR' },
    };
  };
}

import { unwrapResolverError } from '@apollo/server/errors';
import { GraphQLError, type GraphQLFormattedError } from 'graphql';
import type { Logger } from '../logging/logger.js';
import { DomainError } from './domain-errors.js';

export const INTERNAL_ERROR_MESSAGE = 'internal server error';

/**
 * Apollo's formatError: domain errors keep their message and code; errors that GraphQL itself
 * raised about the request (syntax, validation, variable coercion) keep theirs; everything
 * else (a bug, a database failure) is logged in full and reaches the client as a bare
 * INTERNAL_SERVER_ERROR, so stack traces and SQL never leave the server.
 */
export function createErrorFormatter(logger: Logger) {
  return (formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError => {
    const cause = unwrapResolverError(error);
    const where = {
      ...(formatted.locations ? { locations: formatted.locations } : {}),
      ...(formatted.path ? { path: formatted.path } : {}),
    };
    if (cause instanceof DomainError) {
      return {
        message: cause.message,
        ...where,
        extensions: { ...cause.extensions, code: cause.code },
      };
    }
    const code = formatted.extensions?.['code'];
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

import { IntrinsicException } from '@nestjs/common';

/**
 * Errors that services throw on purpose. Each carries the GraphQL `extensions.code` the client
 * sees and, where useful, more machine-readable extensions. Anything else that escapes a
 * resolver is reported as INTERNAL_SERVER_ERROR without its message (it may hold SQL).
 */
export type ErrorCode =
  | 'BAD_USER_INPUT'
  | 'UNAUTHENTICATED'
  | 'FORBIDDEN'
  | 'NOT_FOUND'
  | 'QUOTA_EXCEEDED'
  | 'NO_CAPACITY'
  | 'CONFLICT'
  | 'QUERY_TOO_COMPLEX'
  | 'RATE_LIMITED'
  | 'TIMEOUT'
  | 'UNAVAILABLE'
  | 'IMAGE_NOT_ALLOWED'
  | 'NO_AGENTS'
  | 'NOT_SUSPENDABLE';

/** Extends IntrinsicException so Nest does not log these as crashes: they are answers. */
export abstract class DomainError extends IntrinsicException {
  abstract readonly code: ErrorCode;

  constructor(
    message: string,
    /** Extra fields for `extensions`, beside `code`; must be safe to show to the caller. */
    readonly extensions: Readonly<Record<string, unknown>> = {},
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** One problem with one input field, so a form can mark the field. */
export interface FieldProblem {
  /** Path of the field in the arguments, like "input.maxBytes" or "name". */
  readonly field: string;
  readonly message: string;
}

export class BadUserInputError extends DomainError {
  readonly code = 'BAD_USER_INPUT';

  constructor(readonly problems: readonly FieldProblem[]) {
    super(problems.map((p) => `${p.field}: ${p.message}`).join('; '), { problems });
  }

  static of(field: string, message: string): BadUserInputError {
    return new BadUserInputError([{ field, message }]);
  }
}

export class UnauthenticatedError extends DomainError {
  readonly code = 'UNAUTHENTICATED';
}

export class ForbiddenError extends DomainError {
  readonly code = 'FORBIDDEN';
}

/** Also what a caller gets for another team's objects: existence is not revealed. */
export class NotFoundError extends DomainError {
  readonly code = 'NOT_FOUND';

  constructor(kind: string, id: string) {
    super(`${kind} ${JSON.stringify(id)} not found`, { kind, id });
  }
}

export class QuotaExceededError extends DomainError {
  readonly code = 'QUOTA_EXCEEDED';
}

/** Why one host could not take the request, for NO_CAPACITY's `extensions.hosts`. */
export interface HostRejection {
  readonly hostId: string;
  readonly hostName: string;
  readonly reason: string;
}

export class NoCapacityError extends DomainError {
  readonly code = 'NO_CAPACITY';

  constructor(message: string, hosts: readonly HostRejection[]) {
    super(message, { hosts });
  }
}

export class ConflictError extends DomainError {
  readonly code = 'CONFLICT';
}

/**
 * A suspend its host cannot do (docs/elastic.md): the host does not suspend (no checkpoint API
 * in its driver, or its operator turned suspends off), or its host RAM budget for suspended
 * shards would be passed. The message says which.
 */
export class NotSuspendableError extends DomainError {
  readonly code = 'NOT_SUSPENDABLE';
}

/**
 * A request refused before it ran for its size: `limit` names which limit (depth, aliases,
 * tokens, nodes, cost), `maximum` the limit and `found` the request's figure.
 */
export class QueryTooComplexError extends DomainError {
  readonly code = 'QUERY_TOO_COMPLEX';

  constructor(limit: string, maximum: number, found: number, detail = '') {
    super(
      `query too complex: its ${limit} is ${found}, the limit is ${maximum}${detail ? ` (${detail})` : ''}`,
      { limit, maximum, found, http: { status: 400 } },
    );
  }
}

/** Too many requests (or too many at once) for one token; `retryAfterSeconds` says when to retry. */
export class RateLimitedError extends DomainError {
  readonly code = 'RATE_LIMITED';

  constructor(message: string, retryAfterSeconds: number) {
    super(message, {
      retryAfterSeconds,
      http: { status: 429, headers: new Map([['retry-after', String(retryAfterSeconds)]]) },
    });
  }
}

/** The request ran past its time budget; what it had done so far is not returned. */
export class TimeoutError extends DomainError {
  readonly code = 'TIMEOUT';

  constructor(budgetMs: number) {
    super(`the request ran past its time budget of ${budgetMs} ms`, { budgetMs });
  }
}

/** The database did not take the request in time (overload); nothing was written. */
export class DatabaseBusyError extends DomainError {
  readonly code = 'UNAVAILABLE';

  constructor() {
    super('the database is too busy to take this request now; nothing was written, send it again', {
      retryAfterSeconds: 1,
    });
  }
}

/** The image's registry or repository is not on the fleet's (or the team's) allow-list. */
export class ImageNotAllowedError extends DomainError {
  readonly code = 'IMAGE_NOT_ALLOWED';

  constructor(image: string, allowed: readonly string[], scope: 'fleet' | 'team') {
    super(
      `image ${JSON.stringify(image)} is not allowed: the ${scope} allows only images under ${allowed
        .map((prefix) => JSON.stringify(prefix))
        .join(', ')}`,
      { field: 'input.image', allowed, scope },
    );
  }
}

/** This control plane was started without agents on purpose: nothing could launch a shard. */
export class NoAgentsError extends DomainError {
  readonly code = 'NO_AGENTS';
}

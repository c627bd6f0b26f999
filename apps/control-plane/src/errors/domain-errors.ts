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
  | 'CONFLICT';

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

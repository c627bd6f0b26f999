/** What `gpushards` exits with; `gpushards help exit-codes` prints this table. */
export const EXIT = {
  OK: 0,
  /** A bug or an unexpected answer. */
  ERROR: 1,
  /** Bad arguments or input: an unknown option, a size like "12gb", a share like 150, BAD_USER_INPUT. */
  USAGE: 2,
  /** Not logged in, or the token was refused (UNAUTHENTICATED). */
  UNAUTHENTICATED: 3,
  /** The token's role may not do this (FORBIDDEN). */
  FORBIDDEN: 4,
  /** No such shard, team, host or token (NOT_FOUND). */
  NOT_FOUND: 5,
  /** Refused for lack of room: QUOTA_EXCEEDED or NO_CAPACITY; `preview` when it does not fit. */
  REFUSED: 6,
  /** Clashes with what exists (CONFLICT), too many requests (RATE_LIMITED), a busy database (UNAVAILABLE). */
  CONFLICT: 7,
  /** The control plane could not be reached. */
  UNREACHABLE: 8,
  /** `shards wait`: the shard reached another final state, or the wait timed out. */
  WAIT_FAILED: 9,
} as const;

export const EXIT_CODE_HELP = `Exit codes:
  0  success
  1  unexpected error (a bug, or an answer the CLI does not understand)
  2  bad arguments or input (unknown option, a size like "12gb", a compute share like 150,
     a duration like "30 min", BAD_USER_INPUT)
  3  not logged in, or the token was refused (UNAUTHENTICATED)
  4  the token's role may not do this (FORBIDDEN)
  5  not found (NOT_FOUND)
  6  refused for lack of room: QUOTA_EXCEEDED or NO_CAPACITY (memory, shards, or a compute
     share over the team's bound or the GPU's unguaranteed time; an isolated share where no
     host runs an MPS partition, or none has room in it; \`preview\` when it does not fit)
  7  conflict with what exists (CONFLICT: e.g. a new share for an isolated shard that holds
     its GPUs; NOT_SUSPENDABLE: a suspend its host cannot do), rate limited, or the database
     busy (UNAVAILABLE): send it again
  8  the control plane could not be reached
  9  \`shards wait\`: another final state was reached, or the wait timed out`;

const BY_CODE: Readonly<Record<string, number>> = {
  BAD_USER_INPUT: EXIT.USAGE,
  GRAPHQL_VALIDATION_FAILED: EXIT.ERROR,
  UNAUTHENTICATED: EXIT.UNAUTHENTICATED,
  FORBIDDEN: EXIT.FORBIDDEN,
  NOT_FOUND: EXIT.NOT_FOUND,
  QUOTA_EXCEEDED: EXIT.REFUSED,
  NO_CAPACITY: EXIT.REFUSED,
  CONFLICT: EXIT.CONFLICT,
  NOT_SUSPENDABLE: EXIT.CONFLICT,
  RATE_LIMITED: EXIT.CONFLICT,
  UNAVAILABLE: EXIT.CONFLICT,
};

export function exitCodeFor(code: string): number {
  return BY_CODE[code] ?? EXIT.ERROR;
}

/** An error the CLI explains and exits with; never a stack trace for these. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
    readonly code: string = 'ERROR',
    readonly details: readonly string[] = [],
  ) {
    super(message);
  }
}

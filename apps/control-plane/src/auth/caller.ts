import { registerEnumType } from '@nestjs/graphql';

/** Token roles, strongest first; the same strings as the database enum TokenRole. */
export const Role = {
  ADMIN: 'ADMIN',
  MEMBER: 'MEMBER',
  VIEWER: 'VIEWER',
} as const;

export type Role = (typeof Role)[keyof typeof Role];

registerEnumType(Role, {
  name: 'Role',
  description: 'What a token may do.',
  valuesMap: {
    ADMIN: { description: 'The fleet and every team: hosts, teams, quotas, tokens.' },
    MEMBER: {
      description: "Its own team: read, and create or change the team's shards and tokens.",
    },
    VIEWER: { description: 'Its own team, read only.' },
  },
});

const RANK: Readonly<Record<Role, number>> = { ADMIN: 3, MEMBER: 2, VIEWER: 1 };

export function roleAtLeast(role: Role, minimum: Role): boolean {
  return RANK[role] >= RANK[minimum];
}

/** An admin's overrides of the fleet's per-token rate and concurrency limits. */
export interface TokenLimits {
  readonly ratePerSecond?: number;
  readonly rateBurst?: number;
  readonly maxConcurrent?: number;
}

/** A person signed in through OpenID Connect (docs/identity.md), as their provider named them. */
export interface PersonRef {
  readonly id: string;
  readonly subject: string;
  readonly email: string | null;
}

/**
 * The authenticated credential behind a request: an API token, or a person's browser session
 * (then `tokenId` is the session's id, and `person` says who).
 */
export type Caller = (
  | {
      readonly tokenId: string;
      readonly tokenName: string;
      readonly role: typeof Role.ADMIN;
      /** Fleet admins are not bound to a team. */
      readonly teamId: null;
    }
  | {
      readonly tokenId: string;
      readonly tokenName: string;
      readonly role: typeof Role.MEMBER | typeof Role.VIEWER;
      readonly teamId: string;
    }
) & {
  /** Set only when an admin gave the token limits of its own. */
  readonly limits?: TokenLimits;
  /** Set for a signed-in person's session. */
  readonly person?: PersonRef;
};

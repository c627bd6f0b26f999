import { NotFoundError } from '../errors/domain-errors.js';
import { checkId } from '../validation/input.js';
import { Role, type Caller } from './caller.js';

/**
 * Team scoping, the one place that decides what a token may see. Admins see every team; any
 * other token sees only its own. Another team's object is reported NOT_FOUND, exactly like an
 * object that does not exist, so a token cannot probe which ids exist elsewhere.
 */
export function canSeeTeam(caller: Caller, teamId: string | null): boolean {
  return caller.role === Role.ADMIN || (teamId !== null && teamId === caller.teamId);
}

/** Throws NOT_FOUND for `kind` `id` unless the caller may see `teamId` (the object's team). */
export function assertTeamVisible(
  caller: Caller,
  teamId: string | null,
  kind: string,
  id: string,
): void {
  if (!canSeeTeam(caller, teamId)) throw new NotFoundError(kind, id);
}

/**
 * A Prisma `where` fragment for any model with a teamId column: every row for admins, only
 * the caller's team's rows otherwise. Spread it into each query: `{ ...teamScope(caller), ... }`.
 */
export function teamScope(caller: Caller): { teamId?: string } {
  return caller.role === Role.ADMIN ? {} : { teamId: caller.teamId };
}

/**
 * The team a team-wide read is about, from an optional `teamId` argument: the one named (which
 * the caller must see: NOT_FOUND otherwise), else the caller's own; undefined for an admin who
 * named none (every team).
 */
export function requestedTeam(
  caller: Caller,
  teamIdArgument: string | null | undefined,
): string | undefined {
  if (typeof teamIdArgument === 'string') {
    const teamId = checkId('teamId', teamIdArgument);
    assertTeamVisible(caller, teamId, 'team', teamIdArgument);
    return teamId;
  }
  return caller.role === Role.ADMIN ? undefined : caller.teamId;
}

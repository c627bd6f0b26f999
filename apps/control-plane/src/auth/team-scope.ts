import { NotFoundError } from '../errors/domain-errors.js';
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

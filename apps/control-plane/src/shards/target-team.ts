import { Role, type Caller } from '../auth/caller.js';
import { assertTeamVisible } from '../auth/team-scope.js';
import { BadUserInputError } from '../errors/domain-errors.js';
import { checkId } from '../validation/input.js';

/** The team a request acts for: admins must name it; others get theirs and may name no other. */
export function targetTeam(caller: Caller, teamId: string | null | undefined): string {
  if (caller.role === Role.ADMIN) {
    if (typeof teamId !== 'string') {
      throw BadUserInputError.of('input.teamId', 'admins must name the team the shard is for');
    }
    return checkId('input.teamId', teamId);
  }
  if (typeof teamId !== 'string') return caller.teamId;
  const id = checkId('input.teamId', teamId);
  assertTeamVisible(caller, id, 'team', teamId);
  return id;
}

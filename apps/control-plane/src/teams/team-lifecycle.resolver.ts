import { Args, ID, Mutation, Resolver } from '@nestjs/graphql';
import { Role, type Caller } from '../auth/caller.js';
import { CurrentCaller, MinRole } from '../auth/decorators.js';
import { Team, TeamDeletion } from './team.model.js';
import { TeamLifecycleService } from './team-lifecycle.service.js';

@Resolver(() => Team)
export class TeamLifecycleResolver {
  constructor(private readonly lifecycle: TeamLifecycleService) {}

  @MinRole(Role.ADMIN)
  @Mutation(() => Team, { description: 'A new unique name; shards, tokens and history stay.' })
  renameTeam(
    @CurrentCaller() caller: Caller,
    @Args('id', { type: () => ID }) id: string,
    @Args('name') name: string,
  ) {
    return this.lifecycle.rename(caller, id, name);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Team, {
    description:
      'No new shards (createShard, startShard: CONFLICT) and its tokens refused until unarchiveTeam; running shards, usage and history stay.',
  })
  archiveTeam(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return this.lifecycle.archive(caller, id);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Team, { description: 'Undoes archiveTeam: its tokens work again.' })
  unarchiveTeam(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return this.lifecycle.unarchive(caller, id);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => TeamDeletion, {
    description:
      'Deletes the team for good: CONFLICT while it has live shards, unless drainFirst (archive it and stop them; call again once stopped). Its tokens are revoked and its finished shards deleted; the row, shards, usage, audit and events stay for accounting (docs/fleet-and-shards.md, "Teams").',
  })
  deleteTeam(
    @CurrentCaller() caller: Caller,
    @Args('id', { type: () => ID }) id: string,
    @Args('drainFirst', { defaultValue: false }) drainFirst: boolean,
  ) {
    return this.lifecycle.delete(caller, id, drainFirst);
  }
}

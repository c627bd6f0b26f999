import { Args, ID, Mutation, Parent, Query, ResolveField, Resolver } from '@nestjs/graphql';
import { Role, type Caller } from '../auth/caller.js';
import { CurrentCaller, MinRole } from '../auth/decorators.js';
import { ConnectionArgs } from '../graphql/connection.js';
import { QuotaPolicy, QuotaPolicyInput, Team, TeamConnection, TeamUsage } from './team.model.js';
import { TeamsService } from './teams.service.js';

@Resolver(() => Team)
export class TeamsResolver {
  constructor(private readonly teamsService: TeamsService) {}

  @Query(() => TeamConnection, { description: 'Admins: every team. Others: their own team.' })
  teams(@CurrentCaller() caller: Caller, @Args() args: ConnectionArgs) {
    return this.teamsService.list(caller, args);
  }

  @Query(() => Team, {
    description: "NOT_FOUND for teams that do not exist or are not the caller's.",
  })
  team(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return this.teamsService.get(caller, id);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Team)
  createTeam(@CurrentCaller() caller: Caller, @Args('name') name: string) {
    return this.teamsService.create(caller, name);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Team, { description: "Replaces the team's quota policy." })
  setQuotaPolicy(
    @CurrentCaller() caller: Caller,
    @Args('teamId', { type: () => ID }) teamId: string,
    @Args('input') input: QuotaPolicyInput,
  ) {
    return this.teamsService.setQuotaPolicy(caller, teamId, input);
  }

  @ResolveField(() => QuotaPolicy, { nullable: true })
  quotaPolicy(@Parent() team: Team) {
    return this.teamsService.quotaPolicy(team.id);
  }

  @ResolveField(() => TeamUsage)
  usage(@Parent() team: Team) {
    return this.teamsService.usage(team.id);
  }
}

import { Args, ID, Mutation, Parent, ResolveField, Resolver } from '@nestjs/graphql';
import { Role, type Caller } from '../auth/caller.js';
import { CurrentCaller, MinRole } from '../auth/decorators.js';
import { Team } from '../teams/team.model.js';
import { CapPolicy } from './cap-policy.model.js';
import { CapPolicyService } from './cap-policy.service.js';

/** Team.capPolicy, Team.effectiveCapPolicy and the admins' setTeamCapPolicy. */
@Resolver(() => Team)
export class FenceResolver {
  constructor(private readonly policies: CapPolicyService) {}

  @ResolveField(() => CapPolicy, {
    nullable: true,
    description: "The team's own cap policy; null: the fleet's (effectiveCapPolicy).",
  })
  capPolicy(@Parent() team: Team): CapPolicy | null {
    return this.policies.override(team.id);
  }

  @ResolveField(() => CapPolicy, {
    description:
      "What the team's shards run under: capPolicy, else the fleet's GPUSHARDS_CAP_POLICY.",
  })
  effectiveCapPolicy(@Parent() team: Team): CapPolicy {
    return this.policies.effective(team.id);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Team, {
    description:
      "Sets the team's cap policy (null: the fleet's). Running shards take it at their host's next reconcile.",
  })
  setTeamCapPolicy(
    @CurrentCaller() caller: Caller,
    @Args('teamId', { type: () => ID }) teamId: string,
    @Args('policy', { type: () => CapPolicy, nullable: true }) policy: CapPolicy | null,
  ): Promise<Team> {
    return this.policies.set(caller, teamId, policy ?? null);
  }
}

import { Args, ID, Int, Mutation, Parent, ResolveField, Resolver } from '@nestjs/graphql';
import { Role, type Caller } from '../auth/caller.js';
import { CurrentCaller, MinRole } from '../auth/decorators.js';
import { ComputeMode } from '../shards/shard-enums.js';
import { Shard, shardView } from '../shards/shard.model.js';
import { Team } from '../teams/team.model.js';
import { ComputeShareService } from './compute-share.service.js';
import { IdlePolicy } from './idle.model.js';
import { IdlePolicyService } from './idle-policy.service.js';

/** setShardCompute (a running shard's compute share), Team.idlePolicy and setTeamIdlePolicy. */
@Resolver(() => Team)
export class ComputeResolver {
  constructor(
    private readonly shares: ComputeShareService,
    private readonly idle: IdlePolicyService,
  ) {}

  @Mutation(() => Shard, {
    description:
      "A new compute share (and mode) on every GPU of the shard, like resizeShard for memory: within the team's maxComputeSharePercent (QUOTA_EXCEEDED), and each GPU's guaranteed shares at most 100%, those outside its host's isolated partition at most what the partition leaves (NO_CAPACITY). A running shard takes it at its next turn on the GPU. An ISOLATED shard's share and mode are fixed while it holds its GPUs, and a shard that holds its GPUs cannot become ISOLATED (CONFLICT: stop it and start it with the new share). PENDING shards: stored, checked when placed.",
  })
  async setShardCompute(
    @CurrentCaller() caller: Caller,
    @Args('id', { type: () => ID }) id: string,
    @Args('computeSharePercent', {
      type: () => Int,
      nullable: true,
      description: '1-100; null: none (the default split).',
    })
    computeSharePercent: number | null,
    @Args('computeMode', {
      type: () => ComputeMode,
      nullable: true,
      description: 'Default GUARANTEED.',
    })
    computeMode: ComputeMode | null,
  ): Promise<Shard> {
    return shardView(await this.shares.setCompute(caller, id, computeSharePercent, computeMode));
  }

  @ResolveField(() => IdlePolicy, {
    nullable: true,
    description: "What happens to the team's running shards that launch no kernel; null: nothing.",
  })
  idlePolicy(@Parent() team: Team): Promise<IdlePolicy | null> {
    return this.idle.get(team.id);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Team, {
    description:
      "Sets the team's idle policy: a RUNNING shard with no kernel on any GPU for idleAfterSeconds (at least 60) is reported (Shard.idleSince, an IDLE shard event, a warning), and, when stopAfterSeconds is given (at least idleAfterSeconds), stopped after that long (an IDLE_STOP event, then STOPPING); when suspendAfterSeconds is given (at least idleAfterSeconds), an elastic shard is suspended to host RAM after that long instead (an IDLE_SUSPEND event, then SUSPENDING; docs/elastic.md). Only shards whose host reports compute activity (a compute ledger) are judged. idleAfterSeconds null: no policy.",
  })
  setTeamIdlePolicy(
    @CurrentCaller() caller: Caller,
    @Args('teamId', { type: () => ID }) teamId: string,
    @Args('idleAfterSeconds', { type: () => Int, nullable: true }) idleAfterSeconds: number | null,
    @Args('stopAfterSeconds', { type: () => Int, nullable: true }) stopAfterSeconds: number | null,
    @Args('suspendAfterSeconds', { type: () => Int, nullable: true })
    suspendAfterSeconds: number | null,
  ): Promise<Team> {
    return this.idle.set(
      caller,
      teamId,
      idleAfterSeconds ?? null,
      stopAfterSeconds ?? null,
      suspendAfterSeconds ?? null,
    );
  }
}

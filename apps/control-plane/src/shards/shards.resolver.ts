import {
  Args,
  ID,
  Int,
  Mutation,
  Parent,
  Query,
  ResolveField,
  Resolver,
  Subscription,
} from '@nestjs/graphql';
import { Role, type Caller } from '../auth/caller.js';
import { CurrentCaller } from '../auth/decorators.js';
import { Loaders, type RequestLoaders } from '../graphql/request-loaders.js';
import { Team } from '../teams/team.model.js';
import { TeamsService } from '../teams/teams.service.js';
import { PlacementPreview } from './placement-preview.model.js';
import { ShardEvent } from './shard-event.model.js';
import { CreateShardInput, PlacementInput } from './shard-input.model.js';
import {
  EnvVar,
  MASKED_ENV_VALUE,
  Shard,
  ShardConnection,
  ShardGpu,
  ShardsArgs,
  shardView,
} from './shard.model.js';
import { PlacementPreviewService } from './placement-preview.service.js';
import { DEFAULT_STOP_GRACE_SECONDS, ShardMutationsService } from './shard-mutations.service.js';
import { ShardQueriesService } from './shard-queries.service.js';
import { ShardSubscriptionService } from './shard-subscription.service.js';

@Resolver(() => Shard)
export class ShardsResolver {
  constructor(
    private readonly queries: ShardQueriesService,
    private readonly mutations: ShardMutationsService,
    private readonly previews: PlacementPreviewService,
    private readonly subscriptions: ShardSubscriptionService,
    private readonly teams: TeamsService,
  ) {}

  @Query(() => ShardConnection, {
    description: "Newest first. Admins: every team's (or teamId's). Others: their team's only.",
  })
  async shards(@CurrentCaller() caller: Caller, @Args() args: ShardsArgs) {
    const page = await this.queries.list(caller, args);
    return { ...page, edges: page.edges.map((edge) => ({ ...edge, node: shardView(edge.node) })) };
  }

  @Query(() => Shard, {
    description: "NOT_FOUND for shards that do not exist or are not the caller's.",
  })
  async shard(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return shardView(await this.queries.get(caller, id));
  }

  @Query(() => PlacementPreview, {
    description:
      "Where createShard would place this now, or every host's reason why not; reserves nothing.",
  })
  placementPreview(@CurrentCaller() caller: Caller, @Args('input') input: PlacementInput) {
    return this.previews.preview(caller, input);
  }

  @Mutation(() => Shard, {
    description:
      'Validates, checks the quota, places and reserves GPUs, all in one transaction; then tells the host to launch it.',
  })
  async createShard(@CurrentCaller() caller: Caller, @Args('input') input: CreateShardInput) {
    return shardView(await this.mutations.create(caller, input));
  }

  @Mutation(() => Shard, {
    description:
      'Asks the host to stop it (STOPPING; the reservation is released once stopped). On an offline host: STOPPED at once.',
  })
  async stopShard(
    @CurrentCaller() caller: Caller,
    @Args('id', { type: () => ID }) id: string,
    @Args('graceSeconds', {
      type: () => Int,
      nullable: true,
      description: `Seconds between SIGTERM and SIGKILL, 0 to 600 (default ${DEFAULT_STOP_GRACE_SECONDS}).`,
    })
    graceSeconds?: number | null,
  ) {
    return shardView(
      await this.mutations.stop(caller, id, graceSeconds ?? DEFAULT_STOP_GRACE_SECONDS),
    );
  }

  @Mutation(() => Shard, {
    description:
      "Runs a shard whose run ended (STOPPED, EXITED, FAILED, PREEMPTED, EXPIRED) again from its spec: PENDING, placed by the queue, keeping its id, name and history (the team's quota checked again; the last run's exit code and failure reason cleared). Waiting or running already: unchanged; other states (DELETED, STOPPING, suspended, LOST): CONFLICT.",
  })
  async startShard(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return shardView(await this.mutations.start(caller, id));
  }

  @Mutation(() => Shard, {
    description: 'DELETED: reservation released, container removed; the record stays.',
  })
  async deleteShard(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return shardView(await this.mutations.delete(caller, id));
  }

  @Mutation(() => Shard, {
    description:
      'A new memoryPerGpu on the same GPUs (NO_CAPACITY if they lack room; quota checked when it grows).',
  })
  async resizeShard(
    @CurrentCaller() caller: Caller,
    @Args('id', { type: () => ID }) id: string,
    @Args('memoryPerGpu') memoryPerGpu: string,
  ) {
    return shardView(await this.mutations.resize(caller, id, memoryPerGpu));
  }

  @Subscription(() => ShardEvent, {
    description:
      "State changes of the caller's team's shards (admins: every team, or teamId's). Only changes made by the control plane the client is connected to.",
    resolve: (event: ShardEvent) => event,
  })
  shardEvents(
    @CurrentCaller() caller: Caller,
    @Args('teamId', { type: () => ID, nullable: true }) teamId?: string | null,
  ) {
    return this.subscriptions.subscribe(caller, teamId);
  }

  @ResolveField(() => [EnvVar], {
    description: `Its environment. VIEWER tokens see the names with every value as "${MASKED_ENV_VALUE}".`,
  })
  env(@CurrentCaller() caller: Caller, @Parent() shard: Shard): EnvVar[] {
    return caller.role === Role.VIEWER
      ? shard.env.map(({ name }) => ({ name, value: MASKED_ENV_VALUE }))
      : shard.env;
  }

  @ResolveField(() => Team)
  team(
    @CurrentCaller() caller: Caller,
    @Parent() shard: Shard,
    @Loaders() loaders: RequestLoaders,
  ) {
    return this.teams.getLoaded(loaders, caller, shard.teamId);
  }

  @ResolveField(() => [ShardGpu], {
    description: 'Its latest reservation on each GPU, by index (released ones once it stopped).',
  })
  gpus(@Parent() shard: Shard, @Loaders() loaders: RequestLoaders) {
    return this.queries.gpusOf(loaders, shard.id);
  }
}

import { Args, ID, Mutation, Parent, Query, ResolveField, Resolver } from '@nestjs/graphql';
import { Role, type Caller } from '../auth/caller.js';
import { CurrentCaller, MinRole } from '../auth/decorators.js';
import { Loaders, type RequestLoaders } from '../graphql/request-loaders.js';
import { Shard, ShardConnection, ShardsArgs, shardView } from '../shards/shard.model.js';
import { ShardQueriesService } from '../shards/shard-queries.service.js';
import { GpuConnection, GpusArgs, Host, HostConnection, HostsArgs } from './fleet.model.js';
import { FleetReadsService } from './fleet-reads.service.js';
import { HostOperationsService } from './host-operations.service.js';

/**
 * Hosts and GPUs are visible to every token: teams need them to choose models and host
 * selectors, and they carry no team's data (a GPU's reserved bytes are a sum over teams).
 * Shards stay team-scoped, also under Host.shards. Changing hosts is for admins.
 */
@Resolver(() => Host)
export class FleetResolver {
  constructor(
    private readonly fleet: FleetReadsService,
    private readonly operations: HostOperationsService,
    private readonly shardsService: ShardQueriesService,
  ) {}

  @Query(() => HostConnection, { description: 'Every host, by id.' })
  hosts(@Args() args: HostsArgs) {
    return this.fleet.list(args);
  }

  @Query(() => Host)
  host(@Args('id', { type: () => ID }) id: string) {
    return this.fleet.get(id);
  }

  @Query(() => GpuConnection, { description: 'Every GPU, by UUID.' })
  gpus(@Args() args: GpusArgs) {
    return this.fleet.gpus(args);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Host, { description: 'No new shards on the host; its shards keep running.' })
  cordonHost(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return this.operations.cordon(caller, id);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Host, { description: 'The host takes new shards again.' })
  uncordonHost(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return this.operations.uncordon(caller, id);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Host, {
    description:
      'Cordon, and stop every shard on the host (they are not placed elsewhere). DRAINING until uncordoned.',
  })
  drainHost(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return this.operations.drain(caller, id);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => Host, {
    description:
      'Retires a drained host for good (cordoned or OFFLINE, no shard on it but stopped ones): gone from hosts and placement, its agent refused; its history stays. CONFLICT otherwise.',
  })
  removeHost(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return this.operations.remove(caller, id);
  }

  @ResolveField(() => ShardConnection, {
    description: "Shards on this host that the caller may see (team tokens: their team's only).",
  })
  async shards(
    @CurrentCaller() caller: Caller,
    @Parent() host: Host,
    @Args() args: ShardsArgs,
    @Loaders() loaders: RequestLoaders,
  ) {
    const page = await this.shardsService.listOnHost(loaders, caller, host.id, args);
    return { ...page, edges: page.edges.map((edge) => ({ ...edge, node: shardView(edge.node) })) };
  }
}

/** Shard.host, here because the fleet owns hosts. */
@Resolver(() => Shard)
export class ShardHostResolver {
  constructor(private readonly fleet: FleetReadsService) {}

  @ResolveField(() => Host, { nullable: true })
  host(@Parent() shard: Shard, @Loaders() loaders: RequestLoaders) {
    return shard.hostId === null ? null : this.fleet.getLoaded(loaders, shard.hostId);
  }
}

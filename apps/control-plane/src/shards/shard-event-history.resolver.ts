import { Args, ID, Query, Resolver } from '@nestjs/graphql';
import type { Caller } from '../auth/caller.js';
import { CurrentCaller } from '../auth/decorators.js';
import { ShardEventHistoryService } from './shard-event-history.service.js';
import { ShardEventConnection, ShardEventHistoryArgs } from './shard-event.model.js';

/** The stored shard events: what shardEvents told, to read again after a reload or a restart. */
@Resolver()
export class ShardEventHistoryResolver {
  constructor(private readonly history: ShardEventHistoryService) {}

  @Query(() => ShardEventConnection, {
    description:
      "A shard's stored events (state changes and notices), newest first, as far back as the retention keeps them. NOT_FOUND for a shard that does not exist or is not the caller's.",
  })
  shardEventHistory(
    @CurrentCaller() caller: Caller,
    @Args('shardId', { type: () => ID }) shardId: string,
    @Args() args: ShardEventHistoryArgs,
  ) {
    return this.history.ofShard(caller, shardId, args);
  }

  @Query(() => ShardEventConnection, {
    description:
      "The stored events of a team's shards, newest first. Team tokens: their own team's (another teamId is NOT_FOUND). Admins: teamId's, or every team's without one.",
  })
  teamShardEvents(
    @CurrentCaller() caller: Caller,
    @Args('teamId', { type: () => ID, nullable: true }) teamId: string | null | undefined,
    @Args() args: ShardEventHistoryArgs,
  ) {
    return this.history.ofTeam(caller, teamId, args);
  }
}

import { Module } from '@nestjs/common';
import { PlacementModule } from '../placement/placement.module.js';
import { TeamsModule } from '../teams/teams.module.js';
import { ShardCreator } from './shard-creator.js';
import { ShardEventHistoryResolver } from './shard-event-history.resolver.js';
import { ShardEventHistoryService } from './shard-event-history.service.js';
import { ShardLifecycle } from './shard-lifecycle.js';
import { ShardsResolver } from './shards.resolver.js';
import { PlacementPreviewService } from './placement-preview.service.js';
import { LaunchPolicy } from './launch-policy.js';
import { ShardFleetCheck } from './shard-fleet-check.js';
import { ShardMutationsService } from './shard-mutations.service.js';
import { ShardQueriesService } from './shard-queries.service.js';
import { ShardSubscriptionService } from './shard-subscription.service.js';

/**
 * Shards: queries (ShardQueriesService), createShard, stop, delete, resize
 * (ShardMutationsService), placementPreview, the shardEvents subscription and the stored
 * history (shardEventHistory, teamShardEvents). Needs SHARD_COMMANDS (ShardCommandsModule) and the EventsModule.
 */
@Module({
  imports: [PlacementModule, TeamsModule],
  providers: [
    ShardQueriesService,
    ShardMutationsService,
    PlacementPreviewService,
    ShardSubscriptionService,
    ShardFleetCheck,
    LaunchPolicy,
    ShardCreator,
    ShardLifecycle,
    ShardsResolver,
    ShardEventHistoryService,
    ShardEventHistoryResolver,
  ],
  exports: [ShardQueriesService, ShardMutationsService, ShardLifecycle],
})
export class ShardsModule {}

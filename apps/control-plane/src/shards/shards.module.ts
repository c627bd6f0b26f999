import { Module } from '@nestjs/common';
import { PlacementModule } from '../placement/placement.module.js';
import { TeamsModule } from '../teams/teams.module.js';
import { ShardCreator } from './shard-creator.js';
import { ShardLifecycle } from './shard-lifecycle.js';
import { ShardsResolver } from './shards.resolver.js';
import { ShardsService } from './shards.service.js';

/**
 * Shards: createShard and its placement, stop, delete, resize, queries and the shardEvents
 * subscription. Needs SHARD_COMMANDS (ShardCommandsModule) and the EventsModule.
 */
@Module({
  imports: [PlacementModule, TeamsModule],
  providers: [ShardsService, ShardCreator, ShardLifecycle, ShardsResolver],
  exports: [ShardsService, ShardLifecycle],
})
export class ShardsModule {}

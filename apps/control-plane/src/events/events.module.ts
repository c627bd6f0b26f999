import { Global, Module } from '@nestjs/common';
import { ShardEventBus } from './shard-event-bus.js';
import { ShardEventRelay } from './shard-event-relay.js';
import { ShardEventRetentionSweeper } from './shard-event-retention.js';

/**
 * Global: the shards and fleet modules publish shard state changes; subscriptions read them;
 * on PostgreSQL the relay shares them with the other control planes of the database; the
 * retention sweeper keeps their stored history (shard_event) bounded.
 */
@Global()
@Module({
  providers: [ShardEventBus, ShardEventRelay, ShardEventRetentionSweeper],
  exports: [ShardEventBus, ShardEventRetentionSweeper],
})
export class EventsModule {}

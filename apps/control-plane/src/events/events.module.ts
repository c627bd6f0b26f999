import { Global, Module } from '@nestjs/common';
import { ShardEventBus } from './shard-event-bus.js';
import { ShardEventRelay } from './shard-event-relay.js';

/**
 * Global: the shards and fleet modules publish shard state changes; subscriptions read them;
 * on PostgreSQL the relay shares them with the other control planes of the database.
 */
@Global()
@Module({ providers: [ShardEventBus, ShardEventRelay], exports: [ShardEventBus] })
export class EventsModule {}

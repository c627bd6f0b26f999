import { Global, Module } from '@nestjs/common';
import { ShardEventBus } from './shard-event-bus.js';

/** Global: the shards and fleet modules publish shard state changes; subscriptions read them. */
@Global()
@Module({ providers: [ShardEventBus], exports: [ShardEventBus] })
export class EventsModule {}

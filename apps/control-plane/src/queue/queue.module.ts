import { Module } from '@nestjs/common';
import { PlacementModule } from '../placement/placement.module.js';
import { ShardsModule } from '../shards/shards.module.js';
import { AdmissionLease } from './admission-lease.js';
import { QueueMetrics } from './queue-metrics.js';
import { QUEUE_OPTIONS, queueOptionsFromEnv } from './queue-options.js';
import { QueueResolver, TeamShareResolver } from './queue.resolver.js';
import { QueueService } from './queue.service.js';
import { ElasticModule } from '../elastic/elastic.module.js';

/** The pending queue: admission passes, reclaim, and what GraphQL shows of the queue. */
@Module({
  imports: [PlacementModule, ShardsModule, ElasticModule],
  providers: [
    QueueService,
    AdmissionLease,
    QueueMetrics,
    QueueResolver,
    TeamShareResolver,
    { provide: QUEUE_OPTIONS, useFactory: () => queueOptionsFromEnv() },
  ],
  exports: [QueueService],
})
export class QueueModule {}

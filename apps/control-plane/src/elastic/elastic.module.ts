import { Module } from '@nestjs/common';
import { PlacementModule } from '../placement/placement.module.js';
import { ShardsModule } from '../shards/shards.module.js';
import { ElasticMetrics } from './elastic-metrics.js';
import { ElasticMoves } from './elastic-moves.js';
import { ElasticResolver } from './elastic.resolver.js';
import { ElasticService } from './elastic.service.js';

/** Elastic memory (docs/elastic.md): suspend, resume, wake, oversubscription, metrics. */
@Module({
  imports: [PlacementModule, ShardsModule],
  providers: [ElasticMoves, ElasticService, ElasticResolver, ElasticMetrics],
  exports: [ElasticMoves, ElasticService],
})
export class ElasticModule {}

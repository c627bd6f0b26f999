import { Module } from '@nestjs/common';
import { ShardsModule } from '../shards/shards.module.js';
import { ComputeResolver } from './compute.resolver.js';
import { ComputeShareService } from './compute-share.service.js';
import { IdlePolicyService } from './idle-policy.service.js';
import { IdleSweeper } from './idle-sweeper.js';
import { ElasticModule } from '../elastic/elastic.module.js';

/**
 * Compute per shard (issue 17, docs/compute.md): changing a shard's share (setShardCompute),
 * the teams' idle policies and the sweeper that applies them. The share at creation and its
 * placement live with createShard (shards/, placement/).
 */
@Module({
  imports: [ShardsModule, ElasticModule],
  providers: [ComputeShareService, IdlePolicyService, IdleSweeper, ComputeResolver],
  exports: [IdleSweeper],
})
export class ComputeModule {}

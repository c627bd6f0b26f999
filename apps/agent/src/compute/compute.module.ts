import { Module } from '@nestjs/common';

import { ProcessOwnersModule } from '../enforcement/process-owners.module.js';
import { GpusModule } from '../gpus/gpus.module.js';
import { LimitsModule } from '../limits/limits.module.js';
import { RegionsModule } from '../regions/regions.module.js';
import { ShardsModule } from '../shards/shards.module.js';
import { ComputeFenceService } from './compute-fence.service.js';

/** The compute fence: GPU work no compute-ledger turn governed (docs/agent.md, "Compute fence"). */
@Module({
  imports: [GpusModule, LimitsModule, ProcessOwnersModule, RegionsModule, ShardsModule],
  providers: [ComputeFenceService],
  exports: [ComputeFenceService],
})
export class ComputeModule {}

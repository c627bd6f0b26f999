import { Module } from '@nestjs/common';

import { GpusModule } from '../gpus/gpus.module.js';
import { LimitsModule } from '../limits/limits.module.js';
import { RegionsModule } from '../regions/regions.module.js';
import { ShardsModule } from '../shards/shards.module.js';
import { EnforcementService } from './enforcement.service.js';
import { ProcessOwnersModule } from './process-owners.module.js';

@Module({
  imports: [GpusModule, LimitsModule, ProcessOwnersModule, RegionsModule, ShardsModule],
  providers: [EnforcementService],
  exports: [EnforcementService],
})
export class EnforcementModule {}

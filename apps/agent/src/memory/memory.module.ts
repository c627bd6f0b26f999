import { Module } from '@nestjs/common';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { GpusModule } from '../gpus/gpus.module.js';
import { GpusService } from '../gpus/gpus.service.js';
import { LimitsModule } from '../limits/limits.module.js';
import { RegionsModule } from '../regions/regions.module.js';
import { ShardsModule } from '../shards/shards.module.js';
import { MemoryService } from './memory.service.js';
import { SUSPEND_CAPABILITY, suspendCapability } from './suspend-capability.js';
import { WakeService } from './wake.service.js';

/**
 * Elastic memory (docs/elastic.md): where each running shard's GPU memory is, and its moves to
 * host RAM and back through the driver's checkpoint API.
 */
@Module({
  imports: [GpusModule, LimitsModule, RegionsModule, ShardsModule],
  providers: [
    MemoryService,
    WakeService,
    {
      provide: SUSPEND_CAPABILITY,
      // After GpusService: with the fakes, it sets the variables their libcuda reads when loaded.
      useFactory: (config: AgentConfig, _gpus: GpusService) => suspendCapability(config),
      inject: [AGENT_CONFIG, GpusService],
    },
  ],
  exports: [MemoryService],
})
export class MemoryModule {}

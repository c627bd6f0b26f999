import { Module } from '@nestjs/common';

import { ComputeModule } from '../compute/compute.module.js';
import { ContainersModule } from '../containers/containers.module.js';
import { EnforcementModule } from '../enforcement/enforcement.module.js';
import { GpusModule } from '../gpus/gpus.module.js';
import { MemoryModule } from '../memory/memory.module.js';
import { RegionsModule } from '../regions/regions.module.js';
import { ShardsModule } from '../shards/shards.module.js';
import { AgentService } from './agent.service.js';
import { HeartbeatService } from './heartbeat.service.js';
import { ReconcileService } from './reconcile.service.js';

@Module({
  imports: [
    ContainersModule,
    GpusModule,
    RegionsModule,
    ShardsModule,
    EnforcementModule,
    ComputeModule,
    MemoryModule,
  ],
  providers: [AgentService, HeartbeatService, ReconcileService],
  exports: [AgentService],
})
export class ReconcileModule {}

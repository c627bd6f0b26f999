import { Module } from '@nestjs/common';

import { ContainersModule } from '../containers/containers.module.js';
import { GpusModule } from '../gpus/gpus.module.js';
import { LimitsModule } from '../limits/limits.module.js';
import { RegionsModule } from '../regions/regions.module.js';
import { CommandsController } from './commands.controller.js';
import { CommandsService } from './commands.service.js';
import { ContainerObserver } from './container-observer.js';
import { ContainerSetup } from './container-setup.js';
import { MemoryCommands } from './memory-commands.js';
import { ReconcileRequests } from './reconcile-requests.js';
import { ShardLauncher } from './shard-launcher.js';
import { ShardRegistry } from './shard-registry.js';
import { ShardsService } from './shards.service.js';
import { StateReporter } from './state-reporter.js';

@Module({
  imports: [ContainersModule, GpusModule, RegionsModule, LimitsModule],
  controllers: [CommandsController],
  providers: [
    ShardsService,
    ShardRegistry,
    ShardLauncher,
    ContainerObserver,
    ContainerSetup,
    CommandsService,
    StateReporter,
    ReconcileRequests,
    MemoryCommands,
  ],
  exports: [ShardsService, CommandsService, ReconcileRequests, MemoryCommands],
})
export class ShardsModule {}

import { Module } from '@nestjs/common';
import { PlacementModule } from '../placement/placement.module.js';
import { ShardsModule } from '../shards/shards.module.js';
import { FleetResolver, ShardHostResolver } from './fleet.resolver.js';
import { FleetService } from './fleet.service.js';
import { HostOfflineSweeper } from './host-offline-sweeper.js';

/**
 * The fleet registry: agent messages (FleetService, called by the agent link), host queries
 * and operator mutations, and the offline sweeper. Needs CLOCK (ClockModule).
 */
@Module({
  imports: [PlacementModule, ShardsModule],
  providers: [FleetService, FleetResolver, ShardHostResolver, HostOfflineSweeper],
  exports: [FleetService, HostOfflineSweeper],
})
export class FleetModule {}

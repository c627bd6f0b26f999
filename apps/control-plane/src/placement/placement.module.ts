import { Module } from '@nestjs/common';
import { FleetCache } from './fleet-cache.js';
import { PlacementMetrics } from './placement-metrics.js';
import { PlacementService } from './placement.service.js';

/** Placement on an in-memory copy of the fleet, checked by conditional updates. */
@Module({
  providers: [FleetCache, PlacementService, PlacementMetrics],
  exports: [FleetCache, PlacementService, PlacementMetrics],
})
export class PlacementModule {}

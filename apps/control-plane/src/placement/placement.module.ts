import { Module } from '@nestjs/common';
import { FleetCache } from './fleet-cache.js';
import { PlacementMetrics } from './placement-metrics.js';
import { PlacementService } from './placement.service.js';
import { QueueSignal } from './queue-signal.js';

/** Placement on an in-memory copy of the fleet, checked by conditional updates. */
@Module({
  providers: [FleetCache, PlacementService, PlacementMetrics, QueueSignal],
  exports: [FleetCache, PlacementService, PlacementMetrics, QueueSignal],
})
export class PlacementModule {}

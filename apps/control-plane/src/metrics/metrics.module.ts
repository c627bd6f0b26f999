import { Global, Module } from '@nestjs/common';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { FleetMetrics } from './fleet-metrics.js';
import { LifecycleMetrics } from './lifecycle-metrics.js';
import { MetricsController } from './metrics.controller.js';

/**
 * Global: inject `Registry` (prom-client) to register a module's own series, named
 * `gpushards_*`. Each control plane has its own registry, so several can run in one process
 * (tests) without clashing in prom-client's global one.
 */
@Global()
@Module({
  controllers: [MetricsController],
  providers: [
    {
      provide: Registry,
      useFactory: () => {
        const registry = new Registry();
        collectDefaultMetrics({ register: registry, prefix: 'gpushards_control_plane_' });
        return registry;
      },
    },
    FleetMetrics,
    LifecycleMetrics,
  ],
  exports: [Registry, FleetMetrics, LifecycleMetrics],
})
export class MetricsModule {}

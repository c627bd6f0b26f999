import { Global, Module } from '@nestjs/common';

import { AgentMetrics } from './agent-metrics.js';
import { MetricsHttpServer } from './metrics-http.js';

/** The agent's metrics, for every domain module to count into. */
@Global()
@Module({
  providers: [AgentMetrics, MetricsHttpServer],
  exports: [AgentMetrics],
})
export class MetricsModule {}

import { Module } from '@nestjs/common';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { ProcessOwners } from './process-owners.js';

/**
 * The agent's one ProcessOwners (pid → container through /proc/<pid>/cgroup), shared by the
 * memory fence (EnforcementService) and the compute fence (ComputeFenceService) so that a
 * process both see is read from /proc once. Each fence ends its sample with endSample(), which
 * keeps the PIDs seen since the previous endSample of either fence.
 */
@Module({
  providers: [
    {
      provide: ProcessOwners,
      useFactory: (config: AgentConfig) => new ProcessOwners(config.enforcement.procRoot),
      inject: [AGENT_CONFIG],
    },
  ],
  exports: [ProcessOwners],
})
export class ProcessOwnersModule {}

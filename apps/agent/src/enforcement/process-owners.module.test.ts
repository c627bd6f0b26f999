import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { Global, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';

import { ComputeFenceService } from '../compute/compute-fence.service.js';
import { ComputeModule } from '../compute/compute.module.js';
import { AGENT_CONFIG } from '../config/agent-options.js';
import { GpusService } from '../gpus/gpus.service.js';
import { LimitsService } from '../limits/limits.service.js';
import { createLogger, LOGGER } from '../logging/logger.js';
import { AgentMetrics } from '../metrics/agent-metrics.js';
import { RegionWatchService } from '../regions/region-watch.service.js';
import { RegionsService } from '../regions/regions.service.js';
import { ShardsService } from '../shards/shards.service.js';
import { EnforcementModule } from './enforcement.module.js';
import { EnforcementService } from './enforcement.service.js';
import { ProcessOwners } from './process-owners.js';
import { ProcessOwnersModule } from './process-owners.module.js';

/** What the two fences take besides ProcessOwners, as stand-ins: only their wiring is tested. */
@Global()
@Module({
  providers: [
    { provide: AGENT_CONFIG, useValue: { enforcement: { procRoot: '/nonexistent-proc' } } },
    { provide: LOGGER, useValue: createLogger('silent', 'owners-test') },
    { provide: GpusService, useValue: {} },
    { provide: ShardsService, useValue: {} },
    { provide: LimitsService, useValue: {} },
    { provide: RegionsService, useValue: {} },
    { provide: RegionWatchService, useValue: { onPressure: () => undefined } },
    { provide: AgentMetrics, useValue: new AgentMetrics() },
  ],
  exports: [
    AGENT_CONFIG,
    LOGGER,
    GpusService,
    ShardsService,
    LimitsService,
    RegionsService,
    RegionWatchService,
    AgentMetrics,
  ],
})
class StandIns {}

/** The two fences, each through the module of its own that imports ProcessOwnersModule. */
@Module({
  imports: [StandIns, ProcessOwnersModule],
  providers: [EnforcementService, ComputeFenceService],
})
class TwoFences {}

const ownersOf = (fence: unknown): ProcessOwners => (fence as { owners: ProcessOwners }).owners;

describe('ProcessOwnersModule', () => {
  it('is imported by both fences’ modules', () => {
    for (const module of [EnforcementModule, ComputeModule]) {
      const imports = Reflect.getMetadata('imports', module) as unknown[];
      assert.ok(imports.includes(ProcessOwnersModule), module.name);
    }
  });

  it('gives the memory fence and the compute fence one ProcessOwners, on the configured /proc', async () => {
    const app = await NestFactory.createApplicationContext(TwoFences, { logger: false });
    try {
      const owners = app.get(ProcessOwners, { strict: false });
      assert.ok(owners instanceof ProcessOwners);
      assert.equal(ownersOf(app.get(EnforcementService)), owners);
      assert.equal(ownersOf(app.get(ComputeFenceService)), owners);
      // Read once, through whichever fence: the other finds it cached.
      assert.equal(owners.containerOf(4242), null);
      assert.equal(ownersOf(app.get(ComputeFenceService)).containerOf(4242), null);
      assert.equal(owners.reads, 1);
    } finally {
      await app.close();
    }
  });
});

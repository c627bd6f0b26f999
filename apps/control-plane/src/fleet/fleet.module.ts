import { Module } from '@nestjs/common';
import { PlacementModule } from '../placement/placement.module.js';
import { ShardsModule } from '../shards/shards.module.js';
import { FleetResolver, ShardHostResolver } from './fleet.resolver.js';
import { AgentReportsService } from './agent-reports.service.js';
import { DesiredShards } from './desired-shards.js';
import { HostRegistrationService } from './host-registration.service.js';
import { FleetReadsService } from './fleet-reads.service.js';
import { HostLivenessService } from './host-liveness.service.js';
import { HostOperationsService } from './host-operations.service.js';
import { StuckShardSweeper } from './stuck-shard-sweeper.js';
import { HostOfflineSweeper } from './host-offline-sweeper.js';
import { RemovedHosts } from './removed-hosts.js';
import { HostCredentialRevoker } from './host-credentials.js';

/**
 * The fleet registry, by concern: what agents report (AgentReportsService, called by the agent
 * link; registrations batched by HostRegistrationService, replies' shards by DesiredShards), hosts going silent and coming back (HostLivenessService, HostOfflineSweeper),
 * shards stuck in a transitional state (StuckShardSweeper), operators' cordon/uncordon/drain (HostOperationsService) and reads (FleetReadsService).
 * Needs CLOCK (ClockModule).
 */
@Module({
  imports: [PlacementModule, ShardsModule],
  providers: [
    AgentReportsService,
    HostRegistrationService,
    DesiredShards,
    HostLivenessService,
    HostOperationsService,
    FleetReadsService,
    FleetResolver,
    ShardHostResolver,
    HostOfflineSweeper,
    StuckShardSweeper,
    RemovedHosts,
    HostCredentialRevoker,
  ],
  exports: [
    RemovedHosts,
    AgentReportsService,
    DesiredShards,
    HostLivenessService,
    HostOfflineSweeper,
    StuckShardSweeper,
  ],
})
export class FleetModule {}

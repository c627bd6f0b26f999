import { DynamicModule, Module } from '@nestjs/common';
import { AccountingModule } from './accounting/accounting.module.js';
import { AgentLinkModule } from './agent-link/agent-link.module.js';
import type { AgentTransport } from './agent-link/agent-transport.js';
import { AuditModule } from './audit/audit.module.js';
import { AuthModule } from './auth/auth.module.js';
import { ComputeModule } from './compute/compute.module.js';
import { ConfigModule } from './config/config.module.js';
import type { ControlPlaneConfig } from './config/control-plane-config.js';
import { DatabaseModule } from './database/index.js';
import { EventsModule } from './events/events.module.js';
import { ExplorerModule } from './explorer/explorer.module.js';
import { FenceModule } from './fence/fence.module.js';
import { PortalModule } from './portal/portal.module.js';
import { ClockModule, type Clock } from './fleet/clock.js';
import { ElasticModule } from './elastic/elastic.module.js';
import { FleetModule } from './fleet/fleet.module.js';
import { HostCredentialsModule, type HostCredentials } from './fleet/host-credentials.js';
import { GraphqlApiModule } from './graphql/graphql-api.module.js';
import { HealthModule } from './health/health.module.js';
import { IdentityModule } from './identity/identity.module.js';
import { LoggingModule } from './logging/logging.module.js';
import type { Logger } from './logging/logger.js';
import { MetricsModule } from './metrics/metrics.module.js';
import { SecretsModule } from './secrets/secrets.module.js';
import { ShardCommandsModule, type ShardCommands } from './shards/shard-commands.js';
import { ShardsModule } from './shards/shards.module.js';
import { QueueModule } from './queue/queue.module.js';
import { TeamLifecycleModule } from './teams/team-lifecycle.module.js';
import { TeamsModule } from './teams/teams.module.js';
import { ApiTokensModule } from './tokens/api-tokens.module.js';

export interface AppModuleOptions {
  readonly config: ControlPlaneConfig;
  readonly logger: Logger;
  readonly operatorOutput: NodeJS.WritableStream;
  /** Default: the system clock. */
  readonly clock?: Clock;
  /** How shard commands reach agents; default: none (UndeliverableShardCommands). */
  readonly shardCommands?: ShardCommands;
  /** Where agent messages come from (NATS or in-process); none: no agent can talk to it. */
  readonly agentTransport?: AgentTransport;
  /** Where removed hosts' credentials are revoked (NATS --auth jwt); none: nowhere. */
  readonly hostCredentials?: HostCredentials;
}

/** The whole control plane. Domain modules (fleet, shards, ...) are added to `imports`. */
@Module({})
export class AppModule {
  static forRoot({
    config,
    logger,
    operatorOutput,
    clock,
    shardCommands,
    agentTransport,
    hostCredentials,
  }: AppModuleOptions): DynamicModule {
    return {
      module: AppModule,
      imports: [
        ConfigModule.forRoot(config),
        LoggingModule.forRoot(logger, operatorOutput),
        DatabaseModule.forRoot(config.database),
        SecretsModule,
        MetricsModule,
        AuditModule,
        AuthModule,
        GraphqlApiModule,
        ExplorerModule,
        PortalModule,
        HealthModule,
        TeamsModule,
        TeamLifecycleModule,
        IdentityModule,
        ApiTokensModule,
        AccountingModule,
        ClockModule.forRoot(clock),
        FenceModule,
        ShardCommandsModule.forRoot(shardCommands),
        EventsModule,
        ShardsModule,
        ComputeModule,
        QueueModule,
        ElasticModule,
        HostCredentialsModule.forRoot(hostCredentials),
        FleetModule,
        ...(agentTransport ? [AgentLinkModule.forRoot(agentTransport)] : []),
      ],
    };
  }
}

import { Global, Module, type DynamicModule } from '@nestjs/common';
import type Docker from 'dockerode';

import { AGENT_CONFIG, type AgentConfig } from './config/agent-options.js';
import { DOCKER } from './containers/docker-runtime.js';
import { AGENT_LINK, type AgentLink } from './link/agent-link.js';
import { LOGGER, type Logger } from './logging/logger.js';
import { MetricsModule } from './metrics/metrics.module.js';
import { ReconcileModule } from './reconcile/reconcile.module.js';

/**
 * The agent's root module. What differs between deployments (configuration, the link to
 * the control plane, the Docker client, the logger) comes in here; the domain modules
 * (gpus, containers, regions, shards, reconcile) take them by injection token.
 */
@Global()
@Module({})
export class AgentModule {
  static forRoot(
    config: AgentConfig,
    link: AgentLink,
    docker: Docker,
    logger: Logger,
  ): DynamicModule {
    return {
      module: AgentModule,
      imports: [MetricsModule, ReconcileModule],
      providers: [
        { provide: AGENT_CONFIG, useValue: config },
        { provide: AGENT_LINK, useValue: link },
        { provide: DOCKER, useValue: docker },
        { provide: LOGGER, useValue: logger },
      ],
      exports: [AGENT_CONFIG, AGENT_LINK, DOCKER, LOGGER],
    };
  }
}

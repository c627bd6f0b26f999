import { createServer, type Server } from 'node:http';

import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { AgentMetrics } from './agent-metrics.js';

/**
 * `GET /metrics` on GPUSHARDS_METRICS_LISTEN (host:port) when it is set: Prometheus text, no
 * token (host-level numbers, like the control plane's). Anything else is 404.
 */
@Injectable()
export class MetricsHttpServer implements OnApplicationBootstrap, OnModuleDestroy {
  private server: Server | undefined;
  private readonly logger: Logger;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly metrics: AgentMetrics,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'metrics' });
  }

  /** The address it listens on once started (port 0 picks one), for tests. */
  address(): { host: string; port: number } | undefined {
    const address = this.server?.address();
    return typeof address === 'object' && address !== null
      ? { host: address.address, port: address.port }
      : undefined;
  }

  async onApplicationBootstrap(): Promise<void> {
    const listen = this.config.metricsListen;
    if (listen === undefined) return;
    const server = createServer((request, response) => {
      if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
        response.writeHead(404).end();
        return;
      }
      this.metrics.text().then(
        (text) => {
          response.writeHead(200, { 'content-type': this.metrics.registry.contentType });
          response.end(text);
        },
        (error: unknown) => {
          this.logger.warn({ err: error }, 'cannot collect the metrics');
          response.writeHead(500).end();
        },
      );
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(listen.port, listen.host, () => resolve());
    });
    this.server = server;
    this.logger.info({ metrics: this.address() }, 'serving metrics');
  }

  async onModuleDestroy(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

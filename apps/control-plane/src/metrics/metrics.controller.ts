import { Controller, Get, Headers, Inject, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { createHash, timingSafeEqual } from 'node:crypto';
import { Registry } from 'prom-client';
import { Public } from '../auth/decorators.js';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/**
 * Prometheus scrapes without an API token. The numbers name teams and shards, so an operator
 * may set GPUSHARDS_METRICS_TOKEN: then a scrape needs `Authorization: Bearer <that token>`
 * (deploy/prometheus shows the scrape config) and anything else gets a 401.
 */
@Public()
@Controller()
export class MetricsController {
  private readonly expected: Buffer | null;

  constructor(
    private readonly registry: Registry,
    @Inject(CONTROL_PLANE_CONFIG) config: ControlPlaneConfig,
  ) {
    const token = config.security.metricsToken;
    this.expected = token === null ? null : digest(`Bearer ${token}`);
  }

  @Get('/metrics')
  async metrics(
    @Headers('authorization') authorization: string | undefined,
    @Res() reply: FastifyReply,
  ): Promise<void> {
    if (this.expected !== null && !timingSafeEqual(digest(authorization ?? ''), this.expected)) {
      void reply
        .status(401)
        .header('www-authenticate', 'Bearer realm="metrics"')
        .header('content-type', 'text/plain; charset=utf-8')
        .send('metrics need "Authorization: Bearer <GPUSHARDS_METRICS_TOKEN>"\n');
      return;
    }
    const text = await this.registry.metrics();
    // "text/plain; version=0.0.4; charset=utf-8", set explicitly: Fastify sends a string as
    // text/plain; charset=utf-8 without the version Prometheus looks for.
    void reply.status(200).header('content-type', this.registry.contentType).send(text);
  }
}

import { Controller, Get, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Registry } from 'prom-client';
import { Public } from '../auth/decorators.js';

/** Prometheus scrapes without a token; the numbers are fleet-level, not secrets. */
@Public()
@Controller()
export class MetricsController {
  constructor(private readonly registry: Registry) {}

  @Get('/metrics')
  async metrics(@Res() reply: FastifyReply): Promise<void> {
    const text = await this.registry.metrics();
    // "text/plain; version=0.0.4; charset=utf-8", set explicitly: Fastify sends a string as
    // text/plain; charset=utf-8 without the version Prometheus looks for.
    void reply.status(200).header('content-type', this.registry.contentType).send(text);
  }
}

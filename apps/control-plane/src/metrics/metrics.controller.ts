import { Controller, Get, Res } from '@nestjs/common';
import { Registry } from 'prom-client';
import { Public } from '../auth/decorators.js';

interface PlainResponse {
  type(contentType: string): PlainResponse;
  send(body: string): void;
}

/** Prometheus scrapes without a token; the numbers are fleet-level, not secrets. */
@Public()
@Controller()
export class MetricsController {
  constructor(private readonly registry: Registry) {}

  @Get('/metrics')
  async metrics(@Res() response: PlainResponse): Promise<void> {
    response.type(this.registry.contentType).send(await this.registry.metrics());
  }
}

import { Controller, Get, HttpCode, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Public } from '../auth/decorators.js';
import { HealthService } from './health.service.js';

@Public()
@Controller()
export class HealthController {
  constructor(private readonly health: HealthService) {}

  /** Liveness: the process answers HTTP. Deliberately checks nothing else. */
  @Get('/healthz')
  @HttpCode(200)
  healthz() {
    return { status: 'ok' };
  }

  /** Readiness: 200 when the database is reachable and migrated, 503 with the reason otherwise. */
  @Get('/readyz')
  async readyz(@Res() reply: FastifyReply): Promise<void> {
    const readiness = await this.health.readiness();
    // An object is sent as JSON (application/json; charset=utf-8).
    if (readiness.ready) void reply.status(200).send({ status: 'ready' });
    else void reply.status(503).send({ status: 'not ready', reason: readiness.reason });
  }
}

import { Controller, Get, HttpCode, Res } from '@nestjs/common';
import { Public } from '../auth/decorators.js';
import { HealthService } from './health.service.js';

interface JsonResponse {
  status(code: number): JsonResponse;
  json(body: unknown): void;
}

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
  async readyz(@Res() response: JsonResponse): Promise<void> {
    const readiness = await this.health.readiness();
    if (readiness.ready) response.status(200).json({ status: 'ready' });
    else response.status(503).json({ status: 'not ready', reason: readiness.reason });
  }
}

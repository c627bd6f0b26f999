import { Controller, Get, Inject, NotFoundException, Param, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Public } from '../auth/decorators.js';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { loadPortalFiles, NOT_BUILT_HTML, PORTAL_CSP, type PortalFiles } from './portal-files.js';

/** The team portal at `/` (its data comes from the GraphQL API with the user's token). */
@Public()
@Controller()
export class PortalController {
  private readonly files: PortalFiles;

  constructor(@Inject(CONTROL_PLANE_CONFIG) config: ControlPlaneConfig) {
    this.files = loadPortalFiles(config.portalDir);
  }

  @Get('/')
  index(@Res() reply: FastifyReply): void {
    void reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('content-security-policy', PORTAL_CSP)
      .header('cache-control', 'no-store')
      .header('x-content-type-options', 'nosniff')
      .send(this.files.index ?? NOT_BUILT_HTML);
  }

  @Get('/assets/:file')
  asset(@Param('file') file: string, @Res() reply: FastifyReply): void {
    const asset = this.files.assets.get(file);
    if (asset === undefined) throw new NotFoundException(`Cannot GET /assets/${file}`);
    void reply
      .header('content-type', asset.type)
      .header('cache-control', 'public, max-age=31536000, immutable')
      .header('x-content-type-options', 'nosniff')
      .send(asset.body);
  }
}

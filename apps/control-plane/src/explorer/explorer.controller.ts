import { Controller, Get, Header } from '@nestjs/common';
import { Public } from '../auth/decorators.js';
import { EXPLORER_CSP, EXPLORER_HTML } from './explorer-page.js';

@Public()
@Controller()
export class ExplorerController {
  @Get('/explorer')
  @Header('content-type', 'text/html; charset=utf-8')
  @Header('content-security-policy', EXPLORER_CSP)
  @Header('cache-control', 'no-store')
  page(): string {
    return EXPLORER_HTML;
  }
}

import { Global, Module } from '@nestjs/common';
import { AuditService } from './audit.service.js';

/** Global: every domain module's mutations write audit events. */
@Global()
@Module({ providers: [AuditService], exports: [AuditService] })
export class AuditModule {}

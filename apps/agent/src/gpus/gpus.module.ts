import { Module } from '@nestjs/common';

import { GpusService } from './gpus.service.js';

@Module({ providers: [GpusService], exports: [GpusService] })
export class GpusModule {}

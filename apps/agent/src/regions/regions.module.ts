import { Module } from '@nestjs/common';

import { RegionWatchService } from './region-watch.service.js';
import { RegionsService } from './regions.service.js';

@Module({
  providers: [RegionsService, RegionWatchService],
  exports: [RegionsService, RegionWatchService],
})
export class RegionsModule {}

import { Module } from '@nestjs/common';
import { ShardsModule } from '../shards/shards.module.js';
import { TeamLifecycleResolver } from './team-lifecycle.resolver.js';
import { TeamLifecycleService } from './team-lifecycle.service.js';

/** Renaming, archiving and deleting teams: apart from TeamsModule, since a drain stops shards. */
@Module({
  imports: [ShardsModule],
  providers: [TeamLifecycleService, TeamLifecycleResolver],
})
export class TeamLifecycleModule {}

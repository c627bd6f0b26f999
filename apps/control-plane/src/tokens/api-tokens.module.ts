import { Module } from '@nestjs/common';
import { TeamsModule } from '../teams/teams.module.js';
import { ApiTokensResolver, TeamApiTokensResolver } from './api-tokens.resolver.js';
import { ApiTokensService } from './api-tokens.service.js';

@Module({
  imports: [TeamsModule],
  providers: [ApiTokensResolver, TeamApiTokensResolver, ApiTokensService],
})
export class ApiTokensModule {}

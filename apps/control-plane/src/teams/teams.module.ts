import { Module } from '@nestjs/common';
import { TeamsResolver } from './teams.resolver.js';
import { TeamsService } from './teams.service.js';

@Module({ providers: [TeamsResolver, TeamsService], exports: [TeamsService] })
export class TeamsModule {}

import { Module } from '@nestjs/common';
import { TeamsModule } from '../teams/teams.module.js';
import { AccountingResolver } from './accounting.resolver.js';
import { AccountingService } from './accounting.service.js';

@Module({ imports: [TeamsModule], providers: [AccountingResolver, AccountingService] })
export class AccountingModule {}

import { Args, ID, Parent, Query, ResolveField, Resolver } from '@nestjs/graphql';
import type { Caller } from '../auth/caller.js';
import { CurrentCaller } from '../auth/decorators.js';
import { ConnectionArgs } from '../graphql/connection.js';
import { AccountingService } from './accounting.service.js';
import { ShardUsageReportConnection, UsageDay, UsageReport } from './usage.model.js';
import { MAX_USAGE_WINDOW_DAYS } from './usage-window.js';

@Resolver(() => UsageReport)
export class AccountingResolver {
  constructor(private readonly accounting: AccountingService) {}

  @Query(() => UsageReport, {
    description: `A team's reserved and used GiB-hours and peak over [from, to), at most ${MAX_USAGE_WINDOW_DAYS} days. NOT_FOUND for teams that do not exist or are not the caller's.`,
  })
  usage(
    @CurrentCaller() caller: Caller,
    @Args('teamId', { type: () => ID }) teamId: string,
    @Args('from', { description: 'ISO 8601 with a zone, like "2026-01-01T00:00:00Z".' })
    from: string,
    @Args('to', { description: 'ISO 8601 with a zone; after `from`.' }) to: string,
  ) {
    return this.accounting.usage(caller, teamId, from, to);
  }

  @ResolveField(() => ShardUsageReportConnection, {
    description: 'Shards that held a reservation during the window, by id.',
  })
  shards(@Parent() report: UsageReport, @Args() args: ConnectionArgs) {
    return this.accounting.shardPage(report, args);
  }

  @ResolveField(() => [UsageDay], {
    description:
      'The report per UTC day the window touches, in order (the first and last clipped to the window).',
  })
  days(@Parent() report: UsageReport) {
    return this.accounting.days(report);
  }
}

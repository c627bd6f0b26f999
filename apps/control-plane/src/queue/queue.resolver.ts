import { Args, ID, Int, Parent, Query, ResolveField, Resolver } from '@nestjs/graphql';
import type { Caller } from '../auth/caller.js';
import { CurrentCaller } from '../auth/decorators.js';
import { canSeeTeam } from '../auth/team-scope.js';
import { PrismaService } from '../database/index.js';
import { Shard, shardView } from '../shards/shard.model.js';
import { Team } from '../teams/team.model.js';
import { QueuedShard, TeamShare } from './queue.model.js';
import { QueueService } from './queue.service.js';

/** The most entries `pendingQueue` answers. */
const MAX_QUEUE_ENTRIES = 500;

@Resolver(() => Shard)
export class QueueResolver {
  constructor(
    private readonly queue: QueueService,
    private readonly prisma: PrismaService,
  ) {}

  @ResolveField(() => Int, {
    nullable: true,
    description: 'PENDING: its place in the queue (1 = next), as of the last admission pass.',
  })
  queuePosition(@Parent() shard: Shard): number | null {
    return shard.state === 'PENDING' ? (this.queue.entry(shard.id)?.position ?? null) : null;
  }

  @ResolveField(() => String, {
    nullable: true,
    description: 'PENDING: why it waits. Otherwise null.',
  })
  queueReason(@Parent() shard: Shard): string | null {
    if (shard.state !== 'PENDING') return null;
    return this.queue.entry(shard.id)?.reason ?? 'queued; the next admission pass decides';
  }

  @ResolveField(() => Date, {
    nullable: true,
    description:
      'PENDING: when it is expected to start, as pendingQueue.estimatedStart (an estimate, not a promise); null when none can be given, and for other states.',
  })
  queueEstimatedStart(@Parent() shard: Shard): Date | null {
    return shard.state === 'PENDING' ? (this.queue.entry(shard.id)?.estimatedStart ?? null) : null;
  }

  @Query(() => [QueuedShard], {
    description:
      'Waiting shards in queue order (admins: all teams, others: their own), optionally of one team and one requested GPU model (part of the name).',
  })
  async pendingQueue(
    @CurrentCaller() caller: Caller,
    @Args('teamId', { type: () => ID, nullable: true }) teamId?: string | null,
    @Args('gpuModel', { type: () => String, nullable: true }) gpuModel?: string | null,
  ): Promise<QueuedShard[]> {
    const entries = this.queue
      .queue()
      .filter((entry) => canSeeTeam(caller, entry.teamId))
      .filter((entry) => !teamId || entry.teamId === teamId)
      .slice(0, MAX_QUEUE_ENTRIES * 4);
    const rows = await this.prisma.shard.findMany({
      where: { id: { in: entries.map((entry) => entry.shardId) }, state: 'PENDING' },
    });
    const byId = new Map(rows.map((row) => [row.id, row]));
    const model = gpuModel?.trim().toLowerCase();
    const out: QueuedShard[] = [];
    for (const entry of entries) {
      const row = byId.get(entry.shardId);
      if (row === undefined) continue;
      if (model && !row.gpuModelInclude.some((term) => term.toLowerCase().includes(model))) {
        continue;
      }
      out.push({
        shard: shardView(row),
        position: entry.position,
        reasonKind: entry.reasonKind,
        reason: entry.reason,
        waitingBehind: entry.behind,
        expectedHostId: entry.spotHostId,
        estimatedStart: entry.estimatedStart,
      });
      if (out.length >= MAX_QUEUE_ENTRIES) break;
    }
    return out;
  }
}

@Resolver(() => Team)
export class TeamShareResolver {
  constructor(private readonly queue: QueueService) {}

  @ResolveField(() => TeamShare, {
    description: 'Its guarantee, what it borrows above it, and its fair share.',
  })
  share(@Parent() team: Team): Promise<TeamShare> {
    return this.queue.teamShare(team.id);
  }
}

import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import { setImmediate as yieldToOthers } from 'node:timers/promises';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import {
  DEFAULT_SHARD_EVENT_RETENTION,
  type ShardEventRetention,
} from '../config/shard-event-env.js';
import { PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';

/** How often the history is pruned. */
export const SHARD_EVENT_SWEEP_INTERVAL_MS = 60_000;

/** Rows one DELETE removes at most: each is a short statement of its own. */
export const SHARD_EVENT_DELETE_BATCH = 1_000;

/** Shards whose surplus one DELETE looks at, at most. */
const SHARDS_PER_STATEMENT = 100;

/** What one sweep removed. */
export interface ShardEventSweep {
  readonly tooOld: number;
  readonly overPerShard: number;
}

/**
 * Keeps the shard event history bounded (config shardEventRetention): events older than
 * maxAgeDays go, and of each shard only the newest maxPerShard stay. Every minute, in DELETEs
 * of at most SHARD_EVENT_DELETE_BATCH rows, each its own short statement with a turn of the
 * event loop between them, so neither the database's other writers nor this process's
 * requests wait behind a long delete. The per-shard bound looks only at shards with events
 * written since the previous sweep (ids above the highest it saw: every replica's writes, by
 * the primary key), so a sweep reads what is new, not the whole table; the first sweep after a
 * start looks at every shard (an event committed late under a lower id than one the sweep saw
 * waits for its shard's next event). Replicas sweeping at once delete the same rows at most
 * once.
 */
@Injectable()
export class ShardEventRetentionSweeper implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger: Logger;
  private readonly retention: ShardEventRetention;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  /** The highest event id the previous sweep saw (0n: none yet). */
  private sweptUpTo = 0n;

  constructor(
    private readonly prisma: PrismaService,
    @Inject(CONTROL_PLANE_CONFIG) config: ControlPlaneConfig,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shard-events' });
    this.retention = config.shardEventRetention ?? DEFAULT_SHARD_EVENT_RETENTION;
  }

  onApplicationBootstrap(): void {
    this.timer = setInterval(() => {
      if (this.running !== undefined) return;
      this.running = this.sweep()
        .catch((error: unknown) => this.logger.error({ err: error }, 'shard event sweep failed'))
        .finally(() => {
          this.running = undefined;
        });
    }, SHARD_EVENT_SWEEP_INTERVAL_MS);
    this.timer.unref();
  }

  async onModuleDestroy(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }

  /** One pass; what it removed. */
  async sweep(now: Date = new Date()): Promise<ShardEventSweep> {
    const cutoff = new Date(now.getTime() - this.retention.maxAgeDays * 86_400_000);
    let tooOld = 0;
    for (;;) {
      const removed = await this.prisma.direct.$executeRaw`
        DELETE FROM shard_event WHERE id IN (
          SELECT id FROM shard_event WHERE at < ${cutoff} LIMIT ${SHARD_EVENT_DELETE_BATCH})`;
      tooOld += removed;
      if (removed < SHARD_EVENT_DELETE_BATCH) break;
      await yieldToOthers();
    }
    const [highest] = await this.prisma.direct.$queryRaw<{ top: bigint | null }[]>`
      SELECT max(id) AS top FROM shard_event`;
    const top = highest?.top ?? null;
    const touched = await this.prisma.direct.$queryRaw<{ shardId: string }[]>`
      SELECT DISTINCT shard_id::text AS "shardId" FROM shard_event
       WHERE id > ${this.sweptUpTo} AND id <= ${top ?? 0n}`;
    let overPerShard = 0;
    const ids = touched.map((row) => row.shardId);
    for (let start = 0; start < ids.length; start += SHARDS_PER_STATEMENT) {
      const chunk = ids.slice(start, start + SHARDS_PER_STATEMENT);
      for (;;) {
        const removed = await this.prisma.direct.$executeRaw`
          DELETE FROM shard_event WHERE id IN (
            SELECT surplus.id FROM unnest(${chunk}::uuid[]) AS touched(shard_id)
             CROSS JOIN LATERAL (
               SELECT id FROM shard_event kept
                WHERE kept.shard_id = touched.shard_id
                ORDER BY kept.at DESC, kept.id DESC
               OFFSET ${this.retention.maxPerShard}) surplus
             LIMIT ${SHARD_EVENT_DELETE_BATCH})`;
        overPerShard += removed;
        if (removed < SHARD_EVENT_DELETE_BATCH) break;
        await yieldToOthers();
      }
      await yieldToOthers();
    }
    if (top !== null) this.sweptUpTo = BigInt(top);
    if (tooOld + overPerShard > 0) {
      this.logger.debug({ tooOld, overPerShard }, 'shard event history pruned');
    }
    return { tooOld, overPerShard };
  }
}

import { Injectable } from '@nestjs/common';
import { HOST_MEMORY_STATES } from '@gpushards/limits';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { PrismaService } from '../database/index.js';
import type { ShardStateChange } from '../events/shard-event-bus.js';
import { ShardLifecycle } from '../shards/shard-lifecycle.js';

type Kind = 'suspend' | 'resume';

/**
 * Elastic memory's metrics (docs/metrics.md): moves by kind, cause and outcome, the bytes and
 * seconds they took (as the agents measured them), the wake latency (a resume wanted, by a wake
 * or its owner, to its memory back on the GPU), and each host's suspended caps (read when
 * scraped). Counted from the committed state changes of this process.
 */
@Injectable()
export class ElasticMetrics {
  private readonly moves: Counter<'kind' | 'cause' | 'outcome'>;
  private readonly bytes: Counter<'kind'>;
  private readonly seconds: Histogram<'kind'>;
  private readonly wake: Histogram;

  constructor(lifecycle: ShardLifecycle, prisma: PrismaService, registry: Registry) {
    this.moves = new Counter({
      name: 'gpushards_elastic_moves_total',
      help: 'Suspends and resumes of shards finished, by kind (suspend, resume), cause (suspend-requested, idle-suspend, make-room, reclaim) and outcome (done, failed).',
      labelNames: ['kind', 'cause', 'outcome'],
      registers: [registry],
    });
    this.bytes = new Counter({
      name: 'gpushards_elastic_moved_bytes_total',
      help: 'GPU memory moved to host RAM (suspend) and back (resume), as the agents measured it.',
      labelNames: ['kind'],
      registers: [registry],
    });
    this.seconds = new Histogram({
      name: 'gpushards_elastic_move_seconds',
      help: "Seconds one shard's move took on its host, from the first lock (or restore) to the last checkpoint (or unlock).",
      labelNames: ['kind'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
      registers: [registry],
    });
    this.wake = new Histogram({
      name: 'gpushards_elastic_wake_seconds',
      help: 'Seconds from a resume being wanted (a process asked for the GPU, or its owner) to its memory back on the GPU, queue wait included.',
      buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600],
      registers: [registry],
    });
    new Gauge({
      name: 'gpushards_host_suspended_bytes',
      help: "The caps of each host's shards whose GPU memory is going to, in, or coming from its RAM (SUSPENDING, SUSPENDED, RESUMING).",
      labelNames: ['host'],
      registers: [registry],
      async collect(this: Gauge<'host'>) {
        const rows = await prisma.$queryRaw<{ host: string; bytes: number }[]>`
          SELECT host_id AS host, sum(limit_bytes_per_gpu * gpu_count)::float8 AS bytes
            FROM shard WHERE state = ANY(${[...HOST_MEMORY_STATES]}::shard_state[])
                         AND host_id IS NOT NULL
           GROUP BY host_id`;
        this.reset();
        for (const row of rows) this.set({ host: row.host }, row.bytes);
      },
    });
    lifecycle.observe((change) => this.changed(change));
  }

  private changed({ previousState, state, shard, at }: ShardStateChange): void {
    const kind: Kind | undefined =
      previousState === 'SUSPENDING'
        ? 'suspend'
        : previousState === 'RESUMING'
          ? 'resume'
          : undefined;
    if (kind === undefined) return;
    const done =
      (kind === 'suspend' && state === 'SUSPENDED') || (kind === 'resume' && state === 'RUNNING');
    const failed =
      (kind === 'suspend' && state === 'RUNNING') || (kind === 'resume' && state === 'SUSPENDED');
    if (!done && !failed) return;
    const cause = shard.suspendCause ?? 'unknown';
    this.moves.inc({ kind, cause, outcome: done ? 'done' : 'failed' });
    if (!done) return;
    if (shard.memoryMovedBytes !== null) this.bytes.inc({ kind }, Number(shard.memoryMovedBytes));
    if (shard.memoryMoveSeconds !== null) this.seconds.observe({ kind }, shard.memoryMoveSeconds);
    if (kind === 'resume' && shard.resumeWantedAt !== null) {
      this.wake.observe(Math.max(0, (at.getTime() - shard.resumeWantedAt.getTime()) / 1000));
    }
  }
}

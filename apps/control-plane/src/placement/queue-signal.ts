import { Injectable } from '@nestjs/common';

/**
 * How the rest of the control plane tells the queue that capacity may have freed (a
 * reservation released, a host back online, a shard queued), and how createShard learns
 * whether shards wait (a new shard then queues behind them instead of jumping ahead).
 * In-process only; every replica also sweeps on a timer (QueueService), so a signal lost with
 * a replica delays a placement, never loses it.
 */
@Injectable()
export class QueueSignal {
  private readonly listeners: (() => void)[] = [];
  private waiting = 0;

  onFreed(listener: () => void): void {
    this.listeners.push(listener);
  }

  freed(): void {
    for (const listener of this.listeners) listener();
  }

  /** PENDING shards as the last admission pass of this process saw them, plus those queued since. */
  pendingCount(): number {
    return this.waiting;
  }

  setPendingCount(count: number): void {
    this.waiting = count;
  }

  queued(count = 1): void {
    this.waiting += count;
  }
}

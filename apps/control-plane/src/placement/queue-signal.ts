import { Injectable } from '@nestjs/common';

/** What a commit of this process changed for the queue. */
export interface QueueCommit {
  /** Shards that became PENDING (queued, requeued). */
  readonly entered: readonly string[];
  /** Shards that stopped being PENDING (placed, cancelled, expired). */
  readonly left: readonly string[];
  /** A reservation was released or a host came online. */
  readonly freed: boolean;
}

/**
 * How the rest of the control plane tells the queue what changed: a commit of this process
 * (shards queued or leaving the queue, a reservation released, a host back online), or room
 * another control plane freed that this process's fleet cache found; and how createShard
 * learns whether shards wait (a new shard then queues behind them instead of jumping ahead).
 * The queue forwards commits to the admitter when this replica is not it (QueueService).
 */
@Injectable()
export class QueueSignal {
  private readonly freedListeners: (() => void)[] = [];
  private readonly commitListeners: ((commit: QueueCommit) => void)[] = [];
  private waiting = 0;

  onFreed(listener: () => void): void {
    this.freedListeners.push(listener);
  }

  onCommitted(listener: (commit: QueueCommit) => void): void {
    this.commitListeners.push(listener);
  }

  /** Room may have freed (found by the fleet cache, or a commit of another replica). */
  freed(): void {
    for (const listener of this.freedListeners) listener();
  }

  /** A commit of this process changed the queue or freed room. */
  committed(commit: QueueCommit): void {
    this.waiting += commit.entered.length;
    for (const listener of this.commitListeners) listener(commit);
  }

  /** PENDING shards as the last admission pass of this process saw them, plus those queued since. */
  pendingCount(): number {
    return this.waiting;
  }

  setPendingCount(count: number): void {
    this.waiting = count;
  }
}

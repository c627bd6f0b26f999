import type { Heartbeat } from '@gpushards/protocol';

/** How heartbeats are gathered into one write: at most this many, waiting at most this long. */
export interface HeartbeatBatchOptions {
  /** Heartbeats in one batch at most; default 500. */
  readonly maxBatch?: number;
  /** How long the first heartbeat of a batch waits for others; default 200 ms. */
  readonly maxWaitMs?: number;
}

interface Waiting<T> {
  readonly hostId: string;
  readonly heartbeat: Heartbeat;
  resolve(outcome: T): void;
  reject(error: unknown): void;
}

/**
 * Gathers the heartbeats that arrive close together and writes them with one call of
 * `write` (AgentReportsService.recordHeartbeats: two statements and one transaction per batch
 * instead of four statements per heartbeat). A batch goes when it is full or its first
 * heartbeat has waited maxWaitMs; one batch is written at a time, and what arrives meanwhile
 * forms the next. Each caller gets its own heartbeat's outcome, or the batch's error.
 */
export class HeartbeatBatcher<T> {
  private readonly maxBatch: number;
  private readonly maxWaitMs: number;
  private queue: Waiting<T>[] = [];
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> | undefined;

  constructor(
    private readonly write: (
      beats: readonly { hostId: string; heartbeat: Heartbeat }[],
    ) => Promise<T[]>,
    options: HeartbeatBatchOptions = {},
  ) {
    this.maxBatch = options.maxBatch ?? 500;
    this.maxWaitMs = options.maxWaitMs ?? 200;
    if (!Number.isInteger(this.maxBatch) || this.maxBatch < 1 || !(this.maxWaitMs >= 0)) {
      throw new RangeError(
        `heartbeat batches need maxBatch a whole number ≥ 1 and maxWaitMs ≥ 0, got ${JSON.stringify(options)}`,
      );
    }
  }

  /** Resolves once the heartbeat's batch is written, with its outcome. */
  record(hostId: string, heartbeat: Heartbeat): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ hostId, heartbeat, resolve, reject });
      if (this.queue.length >= this.maxBatch) this.flushSoon(0);
      else this.flushSoon(this.maxWaitMs);
    });
  }

  private flushSoon(delayMs: number): void {
    if (this.writing !== undefined) return; // the batch in flight flushes again when done
    if (this.timer !== undefined) {
      if (delayMs > 0) return;
      clearTimeout(this.timer);
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.writing = this.flush().finally(() => {
        this.writing = undefined;
        if (this.queue.length > 0)
          this.flushSoon(this.queue.length >= this.maxBatch ? 0 : this.maxWaitMs);
      });
    }, delayMs);
  }

  private async flush(): Promise<void> {
    const batch = this.queue.splice(0, this.maxBatch);
    if (batch.length === 0) return;
    try {
      const outcomes = await this.write(batch);
      batch.forEach((waiting, i) => waiting.resolve(outcomes[i]!));
    } catch (error) {
      for (const waiting of batch) waiting.reject(error);
    }
  }
}

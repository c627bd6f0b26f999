/** How items are gathered into one write: at most this many, waiting at most this long. */
export interface WriteBatchOptions {
  /** Items in one batch at most; default 500. */
  readonly maxBatch?: number;
  /**
   * How long the first item of a batch waits for others; default 200 ms. With 0 nothing waits
   * longer than the write before it (group commit): what arrives while a batch is written
   * goes together in the next.
   */
  readonly maxWaitMs?: number;
}

interface Waiting<Item, Outcome> {
  readonly item: Item;
  resolve(outcome: Outcome): void;
  reject(error: unknown): void;
}

/**
 * Gathers the items (agent heartbeats, shard state events) that arrive close together and
 * writes them with one call of `write`, so that a burst costs one transaction and one durable
 * commit instead of one each. A batch goes when it is full or its first item has waited
 * maxWaitMs; one batch is written at a time, and what arrives meanwhile forms the next. Each
 * caller gets its own item's outcome, or the batch's error.
 */
export class WriteBatcher<Item, Outcome> {
  private readonly maxBatch: number;
  private readonly maxWaitMs: number;
  private queue: Waiting<Item, Outcome>[] = [];
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> | undefined;

  constructor(
    private readonly write: (items: readonly Item[]) => Promise<Outcome[]>,
    options: WriteBatchOptions = {},
  ) {
    this.maxBatch = options.maxBatch ?? 500;
    this.maxWaitMs = options.maxWaitMs ?? 200;
    if (!Number.isInteger(this.maxBatch) || this.maxBatch < 1 || !(this.maxWaitMs >= 0)) {
      throw new RangeError(
        `write batches need maxBatch a whole number ≥ 1 and maxWaitMs ≥ 0, got ${JSON.stringify(options)}`,
      );
    }
  }

  /** Resolves once the item's batch is written, with its outcome. */
  record(item: Item): Promise<Outcome> {
    return new Promise<Outcome>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
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
      const outcomes = await this.write(batch.map((waiting) => waiting.item));
      batch.forEach((waiting, i) => waiting.resolve(outcomes[i]!));
    } catch (error) {
      for (const waiting of batch) waiting.reject(error);
    }
  }
}

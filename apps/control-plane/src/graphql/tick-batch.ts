/**
 * Coalesces the loads of one event-loop tick into one call: GraphQL resolves a field of every
 * item of a list in the same tick (Shard.gpus for 100 shards), which would otherwise be one
 * query per item. Keys must already be authorized: the batch mixes callers' requests.
 */
export class TickBatch<K, V> {
  private pending = new Map<
    K,
    { resolve: (value: V) => void; reject: (error: unknown) => void }[]
  >();

  /**
   * `loadMany(keys)` answers for every key it was given (the keys are distinct); a key missing
   * from its answer gets `missing`.
   */
  constructor(
    private readonly loadMany: (keys: readonly K[]) => Promise<ReadonlyMap<K, V>>,
    private readonly missing: () => V,
  ) {}

  load(key: K): Promise<V> {
    return new Promise<V>((resolve, reject) => {
      const waiting = this.pending.get(key);
      if (waiting !== undefined) {
        waiting.push({ resolve, reject });
        return;
      }
      if (this.pending.size === 0) setImmediate(() => this.flush());
      this.pending.set(key, [{ resolve, reject }]);
    });
  }

  private flush(): void {
    const batch = this.pending;
    this.pending = new Map();
    this.loadMany([...batch.keys()]).then(
      (values) => {
        for (const [key, waiting] of batch) {
          const value = values.get(key) ?? this.missing();
          for (const { resolve } of waiting) resolve(value);
        }
      },
      (error: unknown) => {
        for (const waiting of batch.values()) for (const { reject } of waiting) reject(error);
      },
    );
  }
}

/**
 * Runs tasks one at a time per key (a shard id), in arrival order; different keys run
 * concurrently. A failing task does not block the ones after it.
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const result = previous.then(task, task);
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }

  /** True while a task for `key` runs or waits. */
  busy(key: string): boolean {
    return this.tails.has(key);
  }
}

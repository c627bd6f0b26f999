/**
 * Runs admission passes one at a time. A trigger while a pass runs (a scheduled one or one
 * asked for with runNow) makes exactly one more pass after it, so a signal that arrives
 * mid-pass, which that pass may not have seen, is never lost.
 */
export class PassRunner<T> {
  private running: Promise<unknown> | undefined;
  private again = false;
  private stopped = false;

  constructor(
    private readonly pass: () => Promise<T>,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** Asks for a pass; passes asked for while one runs make one more pass after it. */
  trigger(): void {
    if (this.stopped) return;
    if (this.running !== undefined) {
      this.again = true;
      return;
    }
    this.start(() => this.loop());
  }

  /** Runs a pass (this one, or `pass`) now, after any running one, and returns its result. */
  async runNow(pass: () => Promise<T> = this.pass): Promise<T> {
    while (this.running !== undefined) await this.running.catch(() => undefined);
    let result!: T;
    await this.start(async () => {
      result = await pass();
    });
    return result;
  }

  /** No pass starts after this; resolves when the running one ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.running?.catch(() => undefined);
  }

  private start(body: () => Promise<void>): Promise<void> {
    // The body starts on the next microtask, once `running` says a pass runs.
    const run = Promise.resolve()
      .then(body)
      .finally(() => {
        this.running = undefined;
        // A trigger during the pass (whichever started it) makes one more.
        if (this.again) {
          this.again = false;
          this.trigger();
        }
      });
    this.running = run;
    return run;
  }

  private async loop(): Promise<void> {
    do {
      this.again = false;
      try {
        await this.pass();
      } catch (error) {
        this.onError(error);
      }
    } while (this.again && !this.stopped);
  }
}

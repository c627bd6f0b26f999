/**
 * Admission of createShard transactions in one process: one at a time per team, and at most
 * `limit` at once. The team lock would serialize a team's creates anyway, but every waiter
 * would hold a pooled connection while it waits, so a burst from one team could take the
 * whole pool; queued here, waiters cost nothing and other teams go ahead. Across processes
 * the team lock still decides.
 */
export class CreateAdmission {
  private readonly teamTails = new Map<string, Promise<void>>();
  private readonly waiting: (() => void)[] = [];
  private running = 0;

  constructor(private readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) {
      throw new RangeError(`admission limit must be a whole number of at least 1, not ${limit}`);
    }
  }

  async run<T>(teamId: string, work: () => Promise<T>): Promise<T> {
    const previous = this.teamTails.get(teamId) ?? Promise.resolve();
    let done!: () => void;
    const tail = previous.then(() => new Promise<void>((resolve) => (done = resolve)));
    this.teamTails.set(teamId, tail);
    await previous;
    try {
      await this.acquire();
      try {
        return await work();
      } finally {
        this.release();
      }
    } finally {
      done();
      if (this.teamTails.get(teamId) === tail) this.teamTails.delete(teamId);
    }
  }

  private acquire(): Promise<void> {
    if (this.running < this.limit) {
      this.running++;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  private release(): void {
    const next = this.waiting.shift();
    if (next !== undefined) next();
    else this.running--;
  }
}

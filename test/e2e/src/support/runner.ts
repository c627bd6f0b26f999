/**
 * A small sequential runner: the checks share one running system, so they run in order, each
 * with a time limit; a failed check is reported and the next one still runs. The last line
 * printed is `N passed, N failed` (scripts/test.mjs counts it).
 */
export interface Check {
  readonly name: string;
  readonly run: () => Promise<void>;
  readonly timeoutMs: number;
}

export interface Outcome {
  readonly name: string;
  readonly ok: boolean;
  readonly seconds: number;
  readonly error?: unknown;
}

export class Runner {
  private readonly checks: Check[] = [];
  readonly outcomes: Outcome[] = [];
  /** Runs after every check, passed or not (a fault check may leave a process down). */
  afterEach: ((ok: boolean) => Promise<void>) | undefined;

  check(name: string, run: () => Promise<void>, timeoutMs = 60_000): void {
    this.checks.push({ name, run, timeoutMs });
  }

  /** Drops every check but the first `keepFirst` and those whose name matches. */
  keepOnly(pattern: RegExp, keepFirst: number): void {
    const kept = this.checks.filter((check, i) => i < keepFirst || pattern.test(check.name));
    this.checks.splice(0, this.checks.length, ...kept);
  }

  get size(): number {
    return this.checks.length;
  }

  /** Runs every check in order; `stopAfter` ends the run early (the suite's own deadline). */
  async runAll(deadline: number): Promise<void> {
    for (const check of this.checks) {
      if (Date.now() > deadline) {
        this.report({
          name: check.name,
          ok: false,
          seconds: 0,
          error: new Error('not run: the suite ran out of time'),
        });
        continue;
      }
      const started = Date.now();
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([
          check.run(),
          new Promise((_, reject) => {
            timer = setTimeout(
              () => reject(new Error(`timed out after ${check.timeoutMs} ms`)),
              check.timeoutMs,
            );
          }),
        ]);
        this.report({ name: check.name, ok: true, seconds: (Date.now() - started) / 1000 });
      } catch (error) {
        this.report({ name: check.name, ok: false, seconds: (Date.now() - started) / 1000, error });
      } finally {
        clearTimeout(timer);
      }
      if (this.afterEach !== undefined) {
        try {
          await this.afterEach(this.outcomes[this.outcomes.length - 1]!.ok);
        } catch (error) {
          this.report({
            name: `restoring the system after: ${check.name}`,
            ok: false,
            seconds: 0,
            error,
          });
        }
      }
    }
  }

  /** Marks every check not yet run as failed with `reason` (setup failed). */
  failRemaining(reason: unknown): void {
    for (const check of this.checks.slice(this.outcomes.length)) {
      this.report({ name: check.name, ok: false, seconds: 0, error: reason });
    }
  }

  report(outcome: Outcome): void {
    this.outcomes.push(outcome);
    const time = `${outcome.seconds.toFixed(1)}s`;
    if (outcome.ok) {
      console.log(`ok   ${outcome.name} (${time})`);
    } else {
      console.log(`FAIL ${outcome.name} (${time})`);
      console.log(indent(describe(outcome.error)));
    }
  }

  summary(): { passed: number; failed: number } {
    const passed = this.outcomes.filter((o) => o.ok).length;
    return { passed, failed: this.outcomes.length - passed };
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? `\ncaused by: ${error.cause.message}` : '';
    const stack = process.env.GPUSHARDS_E2E_STACKS
      ? `\n${error.stack ?? ''}`
      : `\n${(error.stack ?? '').split('\n').slice(1, 3).join('\n')}`;
    return `${error.message}${cause}${stack}`;
  }
  return String(error);
}

function indent(text: string): string {
  return text
    .split('\n')
    .map((line) => `     ${line}`)
    .join('\n');
}

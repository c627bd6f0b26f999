/**
 * Makes a service method slow in a way a test controls: each call first waits for `hold` (the
 * test's gate, or a server-side timer), then runs the real method. For tests of time budgets
 * and concurrency limits, which need requests that are still running when the test acts.
 * `entered(n)` resolves once n calls are waiting; `restore()` puts the method back.
 */
export function holdCalls<T extends object>(
  target: T,
  method: keyof T & string,
  hold: () => Promise<void>,
): { entered(count: number): Promise<void>; restore(): void } {
  const original = target[method] as unknown as (...args: unknown[]) => unknown;
  const own = Object.getOwnPropertyDescriptor(target, method);
  let calls = 0;
  const waiters: { count: number; resolve: () => void }[] = [];
  (target as Record<string, unknown>)[method] = async function (this: unknown, ...args: unknown[]) {
    calls++;
    for (const waiter of waiters.filter((w) => w.count <= calls)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve();
    }
    await hold();
    return original.apply(this, args);
  };
  return {
    entered: (count) =>
      calls >= count
        ? Promise.resolve()
        : new Promise<void>((resolve) => waiters.push({ count, resolve })),
    restore: () => {
      if (own === undefined) delete (target as Record<string, unknown>)[method];
      else Object.defineProperty(target, method, own);
    },
  };
}

/** A promise and the function that resolves it: a gate a test opens. */
export function gate(): { opened: Promise<void>; open(): void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

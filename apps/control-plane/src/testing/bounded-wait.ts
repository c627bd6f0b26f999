/** How long a test's wait may take before it fails naming what it waited for. */
export const WAIT_BOUND_MS = 15_000;

/**
 * `promise`, or a failure naming what was awaited if it has not settled within WAIT_BOUND_MS: a
 * bound on a wait for an event or condition, never the synchronisation itself. `what` may be a
 * function, so that the message says what was seen by then.
 */
export async function within<T>(promise: Promise<T>, what: string | (() => string)): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`timed out waiting for ${typeof what === 'string' ? what : what()}`)),
      WAIT_BOUND_MS,
    );
  });
  try {
    return await Promise.race([promise, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

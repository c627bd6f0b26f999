/** The longest an agent waits before it asks to register again. */
export const REGISTER_RETRY_MAX_MS = 30_000;

/**
 * How long an agent waits before its next registration after `attempt` went unanswered:
 * exponential from 0.5 s up to 30 s, and a random point in the upper half of that. Without the
 * randomness every agent of a fleet that lost its control planes at once (a restart, a network
 * cut) would come back at the same moments, a registration storm at each step.
 */
export function registerRetryDelayMs(attempt: number, random: () => number = Math.random): number {
  const ceiling = Math.min(REGISTER_RETRY_MAX_MS, 500 * 2 ** Math.min(attempt, 6));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

import { DEFAULT_FAIR_SHARE_HALF_LIFE_MS } from '@gpushards/limits';

/** How the queue behaves; from the environment (GPUSHARDS_QUEUE_*), with defaults. */
export interface QueueOptions {
  /** Every replica runs an admission pass this often, whatever the signals (the backstop). */
  readonly sweepMs: number;
  /** Fair share's half-life. */
  readonly halfLifeMs: number;
  /** What a reclaimed shard's container gets between SIGTERM and SIGKILL. */
  readonly reclaimGraceSeconds: number;
}

export const QUEUE_OPTIONS = Symbol('QueueOptions');

function positive(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!(Number.isFinite(value) && value >= 0)) {
    throw new RangeError(`${name} must be a number ≥ 0, got "${raw}"`);
  }
  return value;
}

export function queueOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): QueueOptions {
  return {
    sweepMs: positive(env, 'GPUSHARDS_QUEUE_SWEEP_MS', 2000),
    halfLifeMs:
      positive(
        env,
        'GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS',
        DEFAULT_FAIR_SHARE_HALF_LIFE_MS / 3_600_000,
      ) * 3_600_000,
    reclaimGraceSeconds: positive(env, 'GPUSHARDS_RECLAIM_GRACE_SECONDS', 30),
  };
}

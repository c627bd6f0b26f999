/**
 * Fair share: among teams competing for idle capacity, the one that has used least relative
 * to its guarantee goes first. Usage is GiB-hours (reserved bytes × time, from accounting)
 * decayed exponentially, so last month's burst weighs little and yesterday's a lot.
 */
import { GiB, type Bytes } from '../sizes.js';

/** One week. */
export const DEFAULT_FAIR_SHARE_HALF_LIFE_MS = 7 * 24 * 3600 * 1000;

function checkedHalfLife(halfLifeMs: number): number {
  if (!(halfLifeMs > 0 && Number.isFinite(halfLifeMs))) {
    throw new RangeError(`half-life must be a positive finite number of ms, not ${halfLifeMs}`);
  }
  return halfLifeMs;
}

/** The weight of usage `elapsedMs` old: 1 now, ½ one half-life ago; future usage weighs 1. */
export function decayWeight(
  elapsedMs: number,
  halfLifeMs = DEFAULT_FAIR_SHARE_HALF_LIFE_MS,
): number {
  return 2 ** (-Math.max(0, elapsedMs) / checkedHalfLife(halfLifeMs));
}

export interface DecayedUsageSample {
  /** When the usage happened (for an interval: its end), ms since the epoch. */
  readonly atMs: number;
  readonly gibHours: number;
}

/** Σ gibHours × 2^(−age/halfLife) over the samples, as of nowMs. */
export function decayedUsage(
  samples: readonly DecayedUsageSample[],
  nowMs: number,
  halfLifeMs = DEFAULT_FAIR_SHARE_HALF_LIFE_MS,
): number {
  let total = 0;
  for (const sample of samples) {
    if (!(sample.gibHours >= 0)) throw new RangeError('usage must be a non-negative number');
    total += sample.gibHours * decayWeight(nowMs - sample.atMs, halfLifeMs);
  }
  return total;
}

/** What orders teams by fair share: smaller ratio first, then smaller usage. */
export interface FairShareKey {
  /** Decayed GiB-hours per guaranteed GiB; +Infinity for a team without guarantee that used any. */
  readonly ratio: number;
  readonly decayedGiBHours: number;
}

export function fairShareKey(
  decayedGiBHours: number,
  guaranteeBytes: Bytes | number,
): FairShareKey {
  const used = Math.max(0, decayedGiBHours);
  const guaranteedGiB = guaranteeBytes / GiB;
  const ratio = guaranteedGiB > 0 ? used / guaranteedGiB : used > 0 ? Infinity : 0;
  return { ratio, decayedGiBHours: used };
}

/** Negative when team a has the better claim (used less relative to its guarantee). */
export function compareFairShare(a: FairShareKey, b: FairShareKey): number {
  if (a.ratio !== b.ratio) return a.ratio < b.ratio ? -1 : 1;
  if (a.decayedGiBHours !== b.decayedGiBHours)
    return a.decayedGiBHours < b.decayedGiBHours ? -1 : 1;
  return 0;
}

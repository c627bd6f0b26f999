/**
 * The queue's placement rate: shards placed from the queue per second while shards wait on the
 * fleet, an exponentially weighted average (time constant `windowMs`: what was placed
 * `windowMs` ago counts 1/e as much as what was placed now). It feeds estimateStarts.
 *
 * Only time while some shard waited on the fleet counts (`waiting` of the record before): a
 * queue that was empty, or held only shards waiting on their team's quota, for an hour has not
 * been slow for an hour. Placements made at the end of such a time do not count either (they
 * came out of a wait that was not measured). The first record starts the measure: its
 * placements do not count, since the time they took is not known.
 *
 * Cold: fewer than `minPlacements` counted in the last `windowMs` gives no rate, so a queue
 * that has just started (or has placed little lately) says nothing rather than a number made of
 * one or two placements.
 *
 * Each record adds its placements and, when shards waited on the fleet since the record before,
 * that time; both sums decay by e^(−age/window) and the rate is their ratio, so a queue that
 * places r per second while shards wait reads r from its first counted placement on (no warm-up
 * bias), and a rate that changes shows within about a window. Times are ms; a time before the
 * last record is taken as the last record's (a clock stepped back is not a negative interval).
 */
export interface PlacementRateOptions {
  /** The averaging time constant and the window the minimum counts in; default 10 minutes. */
  readonly windowMs?: number;
  /** Placements counted in the last window before a rate is given; default 5. */
  readonly minPlacements?: number;
}

export const DEFAULT_PLACEMENT_RATE_WINDOW_MS = 10 * 60_000;
export const DEFAULT_PLACEMENT_RATE_MIN_PLACEMENTS = 5;

export class PlacementRate {
  readonly windowMs: number;
  readonly minPlacements: number;
  /** Placements counted, each weighted by its age, as of `at`. */
  private weightedPlacements = 0;
  /** Milliseconds shards waited on the fleet, each weighted by its age, as of `at`. */
  private weightedWaitMs = 0;
  /** The last record's time; undefined before the first. */
  private at: number | undefined;
  /** Whether shards waited on the fleet after the last record. */
  private waiting = false;
  /** Counted placements of the last window: [time, count], oldest first. */
  private readonly recent: [number, number][] = [];

  constructor(options: PlacementRateOptions = {}) {
    this.windowMs = options.windowMs ?? DEFAULT_PLACEMENT_RATE_WINDOW_MS;
    this.minPlacements = options.minPlacements ?? DEFAULT_PLACEMENT_RATE_MIN_PLACEMENTS;
    if (!(Number.isFinite(this.windowMs) && this.windowMs > 0)) {
      throw new RangeError(`windowMs must be a finite number > 0, got ${this.windowMs}`);
    }
    if (!(Number.isInteger(this.minPlacements) && this.minPlacements >= 1)) {
      throw new RangeError(`minPlacements must be a whole number ≥ 1, got ${this.minPlacements}`);
    }
  }

  /**
   * One admission pass applied at `atMs`: it placed `placed` shards from the queue, and after it
   * shards still wait on the fleet (`waitingAfter`) or not.
   */
  record(placed: number, atMs: number, waitingAfter: boolean): void {
    if (!(Number.isInteger(placed) && placed >= 0)) {
      throw new RangeError(`placed must be a whole number ≥ 0, got ${placed}`);
    }
    if (!Number.isFinite(atMs)) throw new RangeError(`atMs must be a finite time, got ${atMs}`);
    if (this.at === undefined) {
      this.at = atMs;
      this.waiting = waitingAfter;
      return;
    }
    const now = Math.max(atMs, this.at);
    const { placements, waitMs } = this.decayedTo(now);
    this.weightedPlacements = placements;
    this.weightedWaitMs = waitMs;
    if (this.waiting && placed > 0) {
      this.weightedPlacements += placed;
      this.recent.push([now, placed]);
    }
    while (this.recent.length > 0 && this.recent[0]![0] <= now - this.windowMs) this.recent.shift();
    this.at = now;
    this.waiting = waitingAfter;
  }

  /** Placements per second at `nowMs`; undefined while cold (see above). */
  perSecond(nowMs: number): number | undefined {
    if (!Number.isFinite(nowMs)) throw new RangeError(`nowMs must be a finite time, got ${nowMs}`);
    if (this.at === undefined) return undefined;
    const now = Math.max(nowMs, this.at);
    let counted = 0;
    for (const [at, placed] of this.recent) if (at > now - this.windowMs) counted += placed;
    if (counted < this.minPlacements) return undefined;
    const { placements, waitMs } = this.decayedTo(now);
    if (!(waitMs > 0)) return undefined;
    return (placements * 1000) / waitMs;
  }

  /** The weighted sums carried from the last record to `now` (≥ it), the wait since included. */
  private decayedTo(now: number): { placements: number; waitMs: number } {
    const elapsed = now - this.at!;
    const decay = Math.exp(-elapsed / this.windowMs);
    return {
      placements: this.weightedPlacements * decay,
      waitMs: this.weightedWaitMs * decay + (this.waiting ? elapsed : 0),
    };
  }
}

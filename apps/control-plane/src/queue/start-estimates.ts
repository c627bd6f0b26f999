import { estimateStarts, PlacementRate, waitsOnFleet, type Waiting } from '@gpushards/limits';

/**
 * What the queue's start estimates need besides the plan (libs/limits `estimateStarts`): the
 * placement rate of this process's applied passes, and when the victims of each reclaim in
 * flight were told to stop, as of the last pass. In memory: a replica that has applied no
 * passes (a follower) has no rate, so it estimates reclaims only; a restarted admitter is cold
 * until it has placed enough again.
 */
export class StartEstimates {
  private readonly rate = new PlacementRate();
  private victimStops: ReadonlyMap<string, readonly number[]> = new Map();

  constructor(private readonly reclaimGraceSeconds: number) {}

  /**
   * A pass applied: `placed` shards placed from the queue, `waiting` still waits. Timed by this
   * process's clock, not the pass's `now` (admitNow may decide for another time).
   */
  applied(placed: number, waiting: readonly Waiting[], atMs: number = Date.now()): void {
    this.rate.record(
      placed,
      atMs,
      waiting.some((w) => waitsOnFleet(w.reason)),
    );
  }

  /** The reclaims in flight a pass saw (read, and started by it): victims' stop times (ms). */
  reclaims(victimStops: ReadonlyMap<string, readonly number[]>): void {
    this.victimStops = victimStops;
  }

  /** Each waiting shard's estimated start at `nowMs`; absent where none can be given. */
  of(waiting: readonly Waiting[], nowMs: number = Date.now()): Map<string, number> {
    const rate = this.rate.perSecond(nowMs);
    return estimateStarts({
      waiting,
      now: nowMs,
      ...(rate === undefined ? {} : { placementsPerSecond: rate }),
      victimStops: this.victimStops,
      reclaimGraceSeconds: this.reclaimGraceSeconds,
    });
  }
}

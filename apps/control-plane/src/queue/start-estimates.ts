import { estimateStarts, PlacementRate, waitsOnFleet, type Waiting } from '@gpushards/limits';

/**
 * What the queue's start estimates need besides the plan (libs/limits `estimateStarts`): the
 * queue's placement rate, and when the victims of each reclaim in flight were told to stop, as
 * of the last pass. The admitter measures the rate from the passes it applies; a follower from
 * its views, by the shards that left the queue between two views and were placed (`viewed`),
 * so every replica's API gives estimates. In memory: a restarted replica is cold until it has
 * seen enough placements again.
 */
export class StartEstimates {
  private readonly rate = new PlacementRate();
  private victimStops: ReadonlyMap<string, readonly number[]> = new Map();
  /** The waiting shards of this process's last view (a follower's); undefined before one. */
  private lastViewed: ReadonlySet<string> | undefined;

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

  /**
   * A follower's view of the queue (`pending`, decided as `waiting`): the shards that waited at
   * its last view and no longer do count as placed if `placedAmong` finds them placed (not
   * deleted or expired). The first view only starts the measure.
   */
  async viewed(
    pending: readonly { readonly id: string }[],
    waiting: readonly Waiting[],
    placedAmong: (shardIds: readonly string[]) => Promise<number>,
    atMs: number = Date.now(),
  ): Promise<void> {
    const ids = new Set(pending.map((shard) => shard.id));
    const left =
      this.lastViewed === undefined ? [] : [...this.lastViewed].filter((id) => !ids.has(id));
    this.lastViewed = ids;
    const placed = left.length === 0 ? 0 : await placedAmong(left);
    this.applied(placed, waiting, atMs);
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

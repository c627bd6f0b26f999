/**
 * When a waiting shard is expected to start, where that can be said from what the queue
 * knows. Pure: the control plane passes the admission plan's waiting shards, the stops in
 * flight for reclaims and the placement rate it measured (PlacementRate), and shows the result
 * as an estimate, never a promise. Shards carry no run-time estimates, so the only clocks are
 * the reclaim grace (a deadline the agent enforces) and the queue's observed throughput.
 *
 * Rules, by why a shard waits:
 * - reclaiming, with a spot: its victims are told to stop, and each is killed at the latest
 *   when its grace ends, so it starts when the last of them is gone: the latest
 *   (stop ordered at + grace); a deadline already past gives `now` (any moment). Without the
 *   victims' stop times, or without a spot (its victims no longer free enough for it: it
 *   reclaims again once they are gone, and what that stops is not known yet): none.
 * - capacity, behind: by throughput, only with a measured rate: it is the (k + 1)-th placement
 *   from now, k being the shards ahead of it that wait on the fleet (capacity, behind,
 *   reclaiming, reclaimed), so now + (k + 1) / rate. Without a rate (a cold queue): none,
 *   rather than a made-up number.
 * - reclaimed (waits until the shard it was stopped for is placed): none unless that shard has
 *   an estimate and there is a rate; then one placement after it, and no earlier than its own
 *   turn by throughput: max(that estimate + 1 / rate, now + (k + 1) / rate).
 * - quota, guarantee: none: it waits on its own team (shards it holds ending, a policy
 *   change), not on the fleet.
 *
 * So estimates are never before `now`, and among shards waiting for capacity or behind they
 * do not decrease along the queue. The throughput model takes shards in queue order; backfill
 * may start a small shard before a big one ahead of it, so it is an estimate for the queue as a
 * whole, not a schedule.
 */
import type { WaitReason, Waiting } from './admission.js';

export interface StartEstimateInput {
  /** The admission plan's waiting shards, in queue order (as the plan lists them). */
  readonly waiting: readonly Waiting[];
  /** Milliseconds since the epoch. */
  readonly now: number;
  /**
   * Placements from the queue per second, as measured (PlacementRate.perSecond); absent when
   * not measured (a cold queue).
   */
  readonly placementsPerSecond?: number;
  /**
   * Per shard whose reclaim is in flight: when each of its victims still stopping was told to
   * stop (ms since the epoch).
   */
  readonly victimStops?: ReadonlyMap<string, readonly number[]>;
  /** What each victim gets between the stop and the kill. */
  readonly reclaimGraceSeconds: number;
}

/** Waiting shards that wait on the fleet (room to free), not on their team. */
export function waitsOnFleet(reason: WaitReason): boolean {
  return reason.kind !== 'quota' && reason.kind !== 'guarantee';
}

/**
 * The estimated start (ms since the epoch) of each waiting shard that has one; the others are
 * absent. See the rules above.
 */
export function estimateStarts(input: StartEstimateInput): Map<string, number> {
  const { now, placementsPerSecond: rate, reclaimGraceSeconds } = input;
  if (!Number.isFinite(now)) throw new RangeError(`now must be a finite time, got ${now}`);
  if (rate !== undefined && !(Number.isFinite(rate) && rate > 0)) {
    throw new RangeError(`placementsPerSecond must be a finite number > 0, got ${rate}`);
  }
  if (!(Number.isFinite(reclaimGraceSeconds) && reclaimGraceSeconds >= 0)) {
    throw new RangeError(
      `reclaimGraceSeconds must be a finite number ≥ 0, got ${reclaimGraceSeconds}`,
    );
  }
  const graceMs = reclaimGraceSeconds * 1000;
  const ordered = input.waiting;
  const estimates = new Map<string, number>();
  /** A reclaimed shard's turn by throughput, kept until the shard it waits for is estimated. */
  const turns = new Map<string, number | undefined>();
  let ahead = 0;
  for (const waiting of ordered) {
    const { reason } = waiting;
    const turn = rate === undefined ? undefined : now + ((ahead + 1) * 1000) / rate;
    switch (reason.kind) {
      case 'capacity':
      case 'behind':
        if (turn !== undefined) estimates.set(waiting.shardId, turn);
        break;
      case 'reclaiming': {
        const deadline =
          waiting.spot === undefined ? undefined : lastDeadline(waiting, input, graceMs);
        if (deadline !== undefined) estimates.set(waiting.shardId, Math.max(now, deadline));
        break;
      }
      case 'reclaimed':
        turns.set(waiting.shardId, turn);
        break;
      case 'quota':
      case 'guarantee':
        break;
    }
    if (waitsOnFleet(reason)) ahead++;
  }
  if (rate === undefined) return estimates;
  // Reclaimed shards after the shards they wait for, which may come later in the queue or be
  // reclaimed themselves (a chain); a cycle has no estimate.
  const reasons = new Map(ordered.map((w) => [w.shardId, w.reason]));
  /** Reclaimed shards already decided (with or without an estimate) or being decided. */
  const visited = new Set<string>();
  const resolve = (shardId: string): number | undefined => {
    const reason = reasons.get(shardId);
    if (reason?.kind !== 'reclaimed' || visited.has(shardId)) return estimates.get(shardId);
    visited.add(shardId);
    const after = resolve(reason.shardId);
    const turn = turns.get(shardId);
    if (after === undefined || turn === undefined) return undefined;
    const estimate = Math.max(after + 1000 / rate, turn);
    estimates.set(shardId, estimate);
    return estimate;
  };
  for (const shardId of turns.keys()) resolve(shardId);
  return estimates;
}

/** The latest (stop ordered at + grace) of a reclaiming shard's victims; none when unknown. */
function lastDeadline(
  waiting: Waiting,
  input: StartEstimateInput,
  graceMs: number,
): number | undefined {
  const stops = input.victimStops?.get(waiting.shardId);
  if (stops === undefined || stops.length === 0) return undefined;
  let latest = -Infinity;
  for (const at of stops) {
    if (!Number.isFinite(at)) {
      throw new RangeError(
        `a stop time of shard ${waiting.shardId}'s victims is not finite: ${at}`,
      );
    }
    latest = Math.max(latest, at);
  }
  return latest + graceMs;
}

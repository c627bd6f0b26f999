/**
 * From per-GPU records to the per-shard input of `account`.
 *
 * The control plane stores a shard's reservation and its usage readings per GPU (one
 * reservation row and one sample per GPU per heartbeat), while `account` takes one interval
 * list and one step function per shard. A shard's usage at time t is the sum, over its GPUs,
 * of each GPU's last reading at or before t; its reservation at t is the sum of the GPU
 * reservations that cover t. Both conversions are exact, so accounting per shard equals
 * accounting each GPU and adding up.
 */
import {
  type EpochMs,
  type ReservationInterval,
  type ShardId,
  type TeamId,
  type UsageSample,
} from './accounting.js';
import { type Bytes, bytes } from './sizes.js';

export interface GpuReservation {
  readonly shardId: ShardId;
  readonly teamId: TeamId;
  readonly gpuUuid: string;
  readonly reservedBytes: Bytes;
  readonly start: EpochMs;
  /** null while still held. */
  readonly end: EpochMs | null;
}

export interface GpuUsageSample {
  readonly shardId: ShardId;
  readonly gpuUuid: string;
  readonly at: EpochMs;
  readonly usedBytes: Bytes;
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const group = groups.get(k);
    if (group === undefined) groups.set(k, [item]);
    else group.push(item);
  }
  return groups;
}

/**
 * One shard's GPU reservations as non-overlapping intervals of their summed bytes: a new
 * interval starts wherever the sum changes, and stretches where nothing is held are left out.
 * GPUs reserved and released together (the usual case) give one interval.
 */
export function shardIntervalsOf(reservations: readonly GpuReservation[]): ReservationInterval[] {
  const intervals: ReservationInterval[] = [];
  for (const [id, held] of groupBy(reservations, (r) => r.shardId)) {
    const team = held[0]!.teamId;
    const changes = new Map<number, number>();
    for (const reservation of held) {
      if (reservation.teamId !== team) {
        throw new RangeError(`shard ${id} belongs to two teams: ${team} and ${reservation.teamId}`);
      }
      const end = reservation.end ?? Infinity;
      if (end < reservation.start) {
        throw new RangeError(
          `shard ${id} releases GPU ${reservation.gpuUuid} (${end}) before reserving it (${reservation.start})`,
        );
      }
      changes.set(
        reservation.start,
        (changes.get(reservation.start) ?? 0) + reservation.reservedBytes,
      );
      changes.set(end, (changes.get(end) ?? 0) - reservation.reservedBytes);
    }
    const times = [...changes.keys()].sort((a, b) => a - b);
    let total = 0;
    let open: { start: number; bytes: number } | null = null;
    for (const t of times) {
      total += changes.get(t) ?? 0;
      if (open !== null && open.bytes === total) continue;
      if (open !== null && open.start < t) {
        intervals.push({
          shardId: id as ShardId,
          teamId: team,
          reservedBytes: bytes(open.bytes),
          start: open.start,
          end: t === Infinity ? null : t,
        });
      }
      open = total > 0 ? { start: t, bytes: total } : null;
    }
  }
  return intervals;
}

/**
 * Per-GPU readings as one step function per shard: at every instant where any of a shard's
 * GPUs was read, the sum of each GPU's latest reading so far (a GPU not read yet counts 0).
 * Input order does not matter; a repeated (shard, GPU, instant) keeps the larger reading, as
 * `account` does for shards.
 */
export function shardSamplesOf(samples: readonly GpuUsageSample[]): UsageSample[] {
  const result: UsageSample[] = [];
  for (const [id, readings] of groupBy(samples, (s) => s.shardId)) {
    // By instant, then GPU, larger reading first: of repeats, the first one is the one kept.
    const sorted = [...readings].sort(
      (a, b) => a.at - b.at || compareText(a.gpuUuid, b.gpuUuid) || b.usedBytes - a.usedBytes,
    );
    const latest = new Map<string, number>();
    let total = 0;
    for (let i = 0; i < sorted.length; i++) {
      const reading = sorted[i]!;
      const previous = sorted[i - 1];
      if (previous?.at !== reading.at || previous.gpuUuid !== reading.gpuUuid) {
        total += reading.usedBytes - (latest.get(reading.gpuUuid) ?? 0);
        latest.set(reading.gpuUuid, reading.usedBytes);
      }
      if (sorted[i + 1]?.at !== reading.at) {
        result.push({ shardId: id as ShardId, at: reading.at, usedBytes: bytes(total) });
      }
    }
  }
  return result;
}

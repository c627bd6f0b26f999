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
    const byTime = new Map<number, Map<string, number>>();
    for (const reading of readings) {
      let gpus = byTime.get(reading.at);
      if (gpus === undefined) byTime.set(reading.at, (gpus = new Map()));
      gpus.set(reading.gpuUuid, Math.max(gpus.get(reading.gpuUuid) ?? 0, reading.usedBytes));
    }
    const latest = new Map<string, number>();
    let total = 0;
    for (const at of [...byTime.keys()].sort((a, b) => a - b)) {
      for (const [gpu, used] of byTime.get(at) ?? []) {
        total += used - (latest.get(gpu) ?? 0);
        latest.set(gpu, used);
      }
      result.push({ shardId: id as ShardId, at, usedBytes: bytes(total) });
    }
  }
  return result;
}

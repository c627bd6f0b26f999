/**
 * Accounting: what shards held and used over a window of time, in GiB-hours.
 *
 * Reserved: a shard's reservedBytes for every moment of its reservation intervals inside the
 * window [from, to); an interval still running (end null) runs to the window's end.
 *
 * Used: a step function of the shard's usage samples. A sample's value holds from its time
 * until the shard's next sample, and is counted only where the shard holds a reservation.
 * Inside the window, before the window's first sample, the last sample before the window
 * holds; before the shard's first sample ever, usage is 0. A sample taken a little before the
 * reservation began (clocks differ between hosts) therefore counts from the reservation's start.
 *
 * Samples arrive late, twice and out of order. A sample is identified by (shardId, at);
 * repeats are one sample, and two different readings for the same instant keep the larger,
 * so the result does not depend on arrival order.
 *
 * Peak: a shard's peak is the largest value of its step function while reserved in the window.
 * A team's peak is the largest, over time, of the sum of its shards' usage at that time: what
 * the team really had in use at once, not the sum of peaks that may never have coincided.
 *
 * Integrals are exact (bigint byte-milliseconds), so a window's totals equal the sum of the
 * totals over any split of it; GiB-hours are those integrals divided by 2^30 × 3 600 000.
 */
import { type Bytes, clampBytes, isBytes } from './sizes.js';

export type ShardId = string & { readonly __brand: 'ShardId' };
export type TeamId = string & { readonly __brand: 'TeamId' };

export function shardId(value: string): ShardId {
  if (value === '') throw new RangeError('shard id must not be empty');
  return value as ShardId;
}

export function teamId(value: string): TeamId {
  if (value === '') throw new RangeError('team id must not be empty');
  return value as TeamId;
}

/** Milliseconds since the Unix epoch, a whole number. */
export type EpochMs = number;

export interface ReservationInterval {
  readonly shardId: ShardId;
  readonly teamId: TeamId;
  /**
   * What the shard held across its GPUs during the interval; the control plane records
   * reservedBytesPerGpu × gpuCount (overhead included: it is GPU memory the shard kept from
   * others). A shard resized while running has one interval per size; they must not overlap.
   */
  readonly reservedBytes: Bytes;
  readonly start: EpochMs;
  /** null while the shard still runs. */
  readonly end: EpochMs | null;
}

export interface UsageSample {
  readonly shardId: ShardId;
  readonly at: EpochMs;
  readonly usedBytes: Bytes;
}

/** [from, to) in epoch milliseconds. */
export interface AccountingWindow {
  readonly from: EpochMs;
  readonly to: EpochMs;
}

interface Totals {
  /** Exact integrals, for sums that must add up. */
  readonly reservedByteMs: bigint;
  readonly usedByteMs: bigint;
  readonly reservedGibHours: number;
  readonly usedGibHours: number;
  readonly peakUsedBytes: Bytes;
}

export interface ShardAccount extends Totals {
  readonly shardId: ShardId;
  readonly teamId: TeamId;
}

export interface TeamAccount extends Totals {
  readonly teamId: TeamId;
  /** Shards with reserved time in the window. */
  readonly shardCount: number;
}

export interface AccountingReport {
  readonly window: AccountingWindow;
  /** Only shards with reserved time in the window, ordered by shard id. */
  readonly shards: readonly ShardAccount[];
  /** Ordered by team id. */
  readonly teams: readonly TeamAccount[];
}

const BYTE_MS_PER_GIB_HOUR = 2 ** 30 * 3_600_000;

export function gibHours(byteMs: bigint): number {
  return Number(byteMs) / BYTE_MS_PER_GIB_HOUR;
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function checkTime(what: string, value: number): void {
  if (!Number.isSafeInteger(value)) {
    throw new RangeError(`${what} must be whole epoch milliseconds, not ${value}`);
  }
}

/** A shard's usage readings: distinct times, ascending. */
interface Steps {
  readonly at: readonly number[];
  readonly used: readonly number[];
}

function stepsByShard(samples: readonly UsageSample[]): Map<ShardId, Steps> {
  const byShard = new Map<ShardId, Map<number, number>>();
  for (const sample of samples) {
    checkTime(`usage sample time of shard ${sample.shardId}`, sample.at);
    if (!isBytes(sample.usedBytes)) {
      throw new RangeError(
        `usage sample of shard ${sample.shardId} has bad usedBytes ${sample.usedBytes}`,
      );
    }
    let readings = byShard.get(sample.shardId);
    if (readings === undefined) byShard.set(sample.shardId, (readings = new Map()));
    readings.set(sample.at, Math.max(readings.get(sample.at) ?? 0, sample.usedBytes));
  }
  const steps = new Map<ShardId, Steps>();
  for (const [id, readings] of byShard) {
    const at = [...readings.keys()].sort((a, b) => a - b);
    steps.set(id, { at, used: at.map((t) => readings.get(t) ?? 0) });
  }
  return steps;
}

/** Index of the last reading at or before t; −1 when there is none. */
function lastAtOrBefore(steps: Steps, t: number): number {
  let low = 0;
  let high = steps.at.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if ((steps.at[middle] ?? Infinity) <= t) low = middle + 1;
    else high = middle;
  }
  return low - 1;
}

/** A change in one shard's usage, for the team sweep; `end` marks the reservation's end. */
interface UsageEvent {
  readonly at: number;
  readonly shard: ShardId;
  readonly used: number;
  readonly end: boolean;
}

interface Segment {
  readonly usedByteMs: bigint;
  readonly peak: number;
}

/** Integrates the step function over [from, to), recording its changes for the team sweep. */
function integrate(
  shard: ShardId,
  steps: Steps,
  from: number,
  to: number,
  events: UsageEvent[],
): Segment {
  let i = lastAtOrBefore(steps, from);
  let t = from;
  let value = steps.used[i] ?? 0;
  let peak = value;
  let sum = 0n;
  events.push({ at: from, shard, used: value, end: false });
  for (i += 1; i < steps.at.length; i++) {
    const next = steps.at[i] ?? Infinity;
    if (next >= to) break;
    sum += BigInt(value) * BigInt(next - t);
    t = next;
    value = steps.used[i] ?? 0;
    peak = Math.max(peak, value);
    events.push({ at: t, shard, used: value, end: false });
  }
  sum += BigInt(value) * BigInt(to - t);
  events.push({ at: to, shard, used: 0, end: true });
  return { usedByteMs: sum, peak };
}

const NO_STEPS: Steps = { at: [], used: [] };

function checkIntervals(intervals: readonly ReservationInterval[]): void {
  const byShard = new Map<ShardId, ReservationInterval[]>();
  for (const interval of intervals) {
    checkTime(`start of shard ${interval.shardId}`, interval.start);
    if (interval.end !== null) {
      checkTime(`end of shard ${interval.shardId}`, interval.end);
      if (interval.end < interval.start) {
        throw new RangeError(
          `shard ${interval.shardId} ends (${interval.end}) before it starts (${interval.start})`,
        );
      }
    }
    if (!isBytes(interval.reservedBytes)) {
      throw new RangeError(
        `shard ${interval.shardId} has bad reservedBytes ${interval.reservedBytes}`,
      );
    }
    const list = byShard.get(interval.shardId);
    if (list === undefined) byShard.set(interval.shardId, [interval]);
    else list.push(interval);
  }
  for (const [id, list] of byShard) {
    const sorted = [...list].sort((a, b) => a.start - b.start);
    for (let i = 1; i < sorted.length; i++) {
      const previous = sorted[i - 1]!;
      const current = sorted[i]!;
      if (current.teamId !== previous.teamId) {
        throw new RangeError(
          `shard ${id} belongs to two teams: ${previous.teamId} and ${current.teamId}`,
        );
      }
      if (previous.end === null || previous.end > current.start) {
        throw new RangeError(
          `shard ${id} has overlapping reservation intervals at ${current.start}`,
        );
      }
    }
  }
}

interface Sums {
  reservedByteMs: bigint;
  usedByteMs: bigint;
  peakUsedBytes: number;
}

function totalsOf(sums: Sums): Totals {
  return {
    reservedByteMs: sums.reservedByteMs,
    usedByteMs: sums.usedByteMs,
    reservedGibHours: gibHours(sums.reservedByteMs),
    usedGibHours: gibHours(sums.usedByteMs),
    peakUsedBytes: clampBytes(sums.peakUsedBytes),
  };
}

/** Largest total usage at any instant, from every shard's changes inside the window. */
function peakOfSum(events: UsageEvent[]): number {
  // At one instant, an interval's end is applied before the next interval's start.
  events.sort((a, b) => a.at - b.at || Number(b.end) - Number(a.end));
  const current = new Map<ShardId, number>();
  let total = 0;
  let peak = 0;
  for (let i = 0; i < events.length; i++) {
    const event = events[i]!;
    total += event.used - (current.get(event.shard) ?? 0);
    current.set(event.shard, event.used);
    const next = events[i + 1];
    if (next === undefined || next.at !== event.at) peak = Math.max(peak, total);
  }
  return peak;
}

/** Reserved and used GiB-hours and peaks per shard and per team over [from, to). */
export function account(
  intervals: readonly ReservationInterval[],
  samples: readonly UsageSample[],
  window: AccountingWindow,
): AccountingReport {
  checkTime('window start', window.from);
  checkTime('window end', window.to);
  if (window.to < window.from) {
    throw new RangeError(`window ends (${window.to}) before it starts (${window.from})`);
  }
  checkIntervals(intervals);
  const steps = stepsByShard(samples);
  const shards = new Map<ShardId, Sums & { readonly teamId: TeamId }>();
  const teamEvents = new Map<TeamId, UsageEvent[]>();
  for (const interval of intervals) {
    const from = Math.max(interval.start, window.from);
    const to = Math.min(interval.end ?? window.to, window.to);
    if (to <= from) continue;
    const events = teamEvents.get(interval.teamId) ?? [];
    teamEvents.set(interval.teamId, events);
    const shardSteps = steps.get(interval.shardId) ?? NO_STEPS;
    const segment = integrate(interval.shardId, shardSteps, from, to, events);
    const sums = shards.get(interval.shardId) ?? {
      teamId: interval.teamId,
      reservedByteMs: 0n,
      usedByteMs: 0n,
      peakUsedBytes: 0,
    };
    sums.reservedByteMs += BigInt(interval.reservedBytes) * BigInt(to - from);
    sums.usedByteMs += segment.usedByteMs;
    sums.peakUsedBytes = Math.max(sums.peakUsedBytes, segment.peak);
    shards.set(interval.shardId, sums);
  }
  const shardAccounts = [...shards]
    .sort(([a], [b]) => compareText(a, b))
    .map(([id, sums]): ShardAccount => ({ shardId: id, teamId: sums.teamId, ...totalsOf(sums) }));
  const teams = new Map<TeamId, Sums & { shardCount: number }>();
  for (const shard of shardAccounts) {
    const team = teams.get(shard.teamId) ?? {
      reservedByteMs: 0n,
      usedByteMs: 0n,
      peakUsedBytes: 0,
      shardCount: 0,
    };
    team.reservedByteMs += shard.reservedByteMs;
    team.usedByteMs += shard.usedByteMs;
    team.shardCount += 1;
    teams.set(shard.teamId, team);
  }
  const teamAccounts = [...teams]
    .sort(([a], [b]) => compareText(a, b))
    .map(([id, team]): TeamAccount => {
      team.peakUsedBytes = peakOfSum(teamEvents.get(id) ?? []);
      return { teamId: id, shardCount: team.shardCount, ...totalsOf(team) };
    });
  return { window, shards: shardAccounts, teams: teamAccounts };
}

/**
 * One stay of a shard's GPU memory in host RAM (elastic memory, docs/elastic.md): its caps over
 * all its GPUs, from when it became SUSPENDED until it left (null: still suspended).
 */
export interface SuspensionInterval {
  readonly shardId: ShardId;
  readonly bytes: Bytes;
  readonly start: EpochMs;
  readonly end: EpochMs | null;
}

/**
 * Suspended GiB-hours per shard over [from, to): what its stays in host RAM held, apart from
 * the GPU-resident GiB-hours `account` reports (a suspended shard holds no GPU). Shards without
 * suspended time in the window are left out.
 */
export function suspendedGibHours(
  intervals: readonly SuspensionInterval[],
  window: AccountingWindow,
): Map<ShardId, number> {
  const byteMs = new Map<ShardId, bigint>();
  for (const interval of intervals) {
    if (!Number.isSafeInteger(interval.bytes) || interval.bytes < 0) {
      throw new RangeError(`suspended bytes must be a whole number ≥ 0, got ${interval.bytes}`);
    }
    const from = Math.max(interval.start, window.from);
    const to = Math.min(interval.end ?? window.to, window.to);
    if (to <= from) continue;
    const sum = byteMs.get(interval.shardId) ?? 0n;
    byteMs.set(interval.shardId, sum + BigInt(interval.bytes) * BigInt(to - from));
  }
  return new Map([...byteMs].map(([id, ms]) => [id, gibHours(ms)]));
}

const DAY_MS = 86_400_000;

/** One UTC calendar day of a window: "YYYY-MM-DD" and the part of the window inside that day. */
export interface AccountingDay {
  readonly day: string;
  readonly window: AccountingWindow;
}

/**
 * The UTC days a window [from, to) touches, in order, each clipped to the window: they cover
 * it exactly, without gaps or overlaps, so per-day accounts add up to the window's. An empty
 * window has no days.
 */
export function utcDaysOf(window: AccountingWindow): AccountingDay[] {
  checkTime('window start', window.from);
  checkTime('window end', window.to);
  if (window.to < window.from) {
    throw new RangeError(`window ends (${window.to}) before it starts (${window.from})`);
  }
  const days: AccountingDay[] = [];
  if (window.to === window.from) return days;
  for (
    let dayStart = Math.floor(window.from / DAY_MS) * DAY_MS;
    dayStart < window.to;
    dayStart += DAY_MS
  ) {
    days.push({
      day: new Date(dayStart).toISOString().slice(0, 10),
      window: { from: Math.max(dayStart, window.from), to: Math.min(dayStart + DAY_MS, window.to) },
    });
  }
  return days;
}

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bytes, GiB } from './sizes.js';
import {
  account,
  type AccountingReport,
  type AccountingWindow,
  type ReservationInterval,
  type ShardAccount,
  shardId,
  suspendedGibHours,
  type TeamAccount,
  teamId,
  type UsageSample,
  utcDaysOf,
} from './accounting.js';

const HOUR = 3_600_000;
const T0 = Date.UTC(2026, 0, 1);

function reservation(
  shard: string,
  team: string,
  gib: number,
  start: number,
  end: number | null,
): ReservationInterval {
  return {
    shardId: shardId(shard),
    teamId: teamId(team),
    reservedBytes: bytes(gib * GiB),
    start,
    end,
  };
}

function sample(shard: string, at: number, gib: number): UsageSample {
  return { shardId: shardId(shard), at, usedBytes: bytes(gib * GiB) };
}

function hours(from: number, to: number): AccountingWindow {
  return { from: T0 + from * HOUR, to: T0 + to * HOUR };
}

function at(hour: number): number {
  return T0 + hour * HOUR;
}

function shardOf(report: AccountingReport, id: string): ShardAccount {
  const found = report.shards.find((s) => s.shardId === id);
  assert.ok(found !== undefined, `no account for shard ${id}`);
  return found;
}

function teamOf(report: AccountingReport, id: string): TeamAccount {
  const found = report.teams.find((t) => t.teamId === id);
  assert.ok(found !== undefined, `no account for team ${id}`);
  return found;
}

describe('reserved GiB-hours', () => {
  test('bytes / 2^30 × hours of the interval inside the window', () => {
    const report = account([reservation('s', 't', 2, at(0), at(3))], [], hours(0, 3));
    const shard = shardOf(report, 's');
    assert.equal(shard.reservedGibHours, 6);
    assert.equal(shard.reservedByteMs, BigInt(2 * GiB) * BigInt(3 * HOUR));
  });

  test('an interval is clipped to the window on both sides', () => {
    const report = account([reservation('s', 't', 1, at(-5), at(10))], [], hours(1, 3));
    assert.equal(shardOf(report, 's').reservedGibHours, 2);
  });

  test('a running shard (end null) counts to the window end', () => {
    const report = account([reservation('s', 't', 4, at(1), null)], [], hours(0, 2));
    assert.equal(shardOf(report, 's').reservedGibHours, 4);
  });

  test('shards without reserved time in the window are left out', () => {
    const report = account(
      [
        reservation('before', 't', 1, at(0), at(1)),
        reservation('after', 't', 1, at(2), null),
        reservation('inside', 'u', 1, at(1), at(2)),
      ],
      [],
      hours(1, 2),
    );
    assert.deepEqual(
      report.shards.map((s) => s.shardId),
      ['inside'],
    );
    assert.deepEqual(
      report.teams.map((t) => t.teamId),
      ['u'],
    );
  });

  test('a resized shard: one interval per size', () => {
    const report = account(
      [reservation('s', 't', 1, at(0), at(1)), reservation('s', 't', 3, at(1), null)],
      [],
      hours(0, 2),
    );
    assert.equal(shardOf(report, 's').reservedGibHours, 4);
    assert.equal(teamOf(report, 't').shardCount, 1);
  });
});

describe('used GiB-hours: a step function of the samples', () => {
  test('each sample holds until the next', () => {
    const report = account(
      [reservation('s', 't', 8, at(0), at(2))],
      [sample('s', at(0), 2), sample('s', at(0.5), 4), sample('s', at(1), 0)],
      hours(0, 2),
    );
    assert.equal(shardOf(report, 's').usedGibHours, 2 * 0.5 + 4 * 0.5);
  });

  test('the last sample before the window holds until the first inside it', () => {
    const report = account(
      [reservation('s', 't', 8, at(0), null)],
      [sample('s', at(0), 6), sample('s', at(1.5), 2)],
      hours(1, 2),
    );
    assert.equal(shardOf(report, 's').usedGibHours, 6 * 0.5 + 2 * 0.5);
    assert.equal(shardOf(report, 's').peakUsedBytes, 6 * GiB);
  });

  test('before the first sample ever, usage is 0', () => {
    const report = account(
      [reservation('s', 't', 8, at(0), at(2))],
      [sample('s', at(1), 4)],
      hours(0, 2),
    );
    assert.equal(shardOf(report, 's').usedGibHours, 4);
  });

  test('a sample taken before the reservation started counts from the start', () => {
    const report = account(
      [reservation('s', 't', 8, at(1), at(2))],
      [sample('s', at(0.9), 4)],
      hours(0, 3),
    );
    assert.equal(shardOf(report, 's').usedGibHours, 4);
  });

  test('usage counts only while reserved: samples after the end change nothing', () => {
    const report = account(
      [reservation('s', 't', 8, at(0), at(1))],
      [sample('s', at(0), 1), sample('s', at(1), 7), sample('s', at(1.5), 8)],
      hours(0, 2),
    );
    assert.equal(shardOf(report, 's').usedGibHours, 1);
    assert.equal(shardOf(report, 's').peakUsedBytes, GiB);
  });

  test('late, repeated and out-of-order samples give the same answer', () => {
    const intervals = [reservation('s', 't', 8, at(0), at(2))];
    const clean = [sample('s', at(0), 2), sample('s', at(1), 4)];
    const messy = [clean[1]!, clean[0]!, clean[1]!, clean[0]!];
    assert.deepEqual(
      account(intervals, messy, hours(0, 2)),
      account(intervals, clean, hours(0, 2)),
    );
  });

  test('two readings for the same instant: the larger holds', () => {
    const report = account(
      [reservation('s', 't', 8, at(0), at(1))],
      [sample('s', at(0), 3), sample('s', at(0), 5)],
      hours(0, 1),
    );
    assert.equal(shardOf(report, 's').usedGibHours, 5);
  });

  test('a shard without samples used nothing', () => {
    const report = account([reservation('s', 't', 8, at(0), at(1))], [], hours(0, 1));
    assert.equal(shardOf(report, 's').usedByteMs, 0n);
    assert.equal(shardOf(report, 's').peakUsedBytes, 0);
  });
});

describe('peaks', () => {
  const intervals = [
    reservation('a', 't', 16, at(0), null),
    reservation('b', 't', 16, at(0), null),
    reservation('c', 'u', 16, at(0), null),
  ];
  const samples = [
    sample('a', at(0), 10),
    sample('a', at(1), 2),
    sample('b', at(0), 1),
    sample('b', at(1), 10),
    sample('c', at(0), 3),
  ];

  test('a team peak is the largest sum at one time, not the sum of shard peaks', () => {
    const report = account(intervals, samples, hours(0, 2));
    assert.equal(shardOf(report, 'a').peakUsedBytes, 10 * GiB);
    assert.equal(shardOf(report, 'b').peakUsedBytes, 10 * GiB);
    assert.equal(teamOf(report, 't').peakUsedBytes, 12 * GiB);
    assert.equal(teamOf(report, 'u').peakUsedBytes, 3 * GiB);
    // Changes at one instant are applied together, whichever shard is listed first.
    const reversed = account([...intervals].reverse(), samples, hours(0, 2));
    assert.equal(teamOf(reversed, 't').peakUsedBytes, 12 * GiB);
  });

  test('per team sums of GiB-hours', () => {
    const team = teamOf(account(intervals, samples, hours(0, 2)), 't');
    assert.equal(team.shardCount, 2);
    assert.equal(team.reservedGibHours, 64);
    assert.equal(team.usedGibHours, 10 + 2 + 1 + 10);
  });

  test('a shard ending as another starts is not counted twice at that instant', () => {
    const report = account(
      [
        reservation('a', 't', 8, at(0), at(1)),
        reservation('b', 't', 8, at(1), at(2)),
        reservation('r', 'u', 2, at(0), at(1)),
        reservation('r', 'u', 4, at(1), at(2)),
      ],
      [sample('a', at(0), 5), sample('b', at(1), 6), sample('r', at(0), 2)],
      hours(0, 2),
    );
    assert.equal(teamOf(report, 't').peakUsedBytes, 6 * GiB);
    assert.equal(teamOf(report, 'u').peakUsedBytes, 2 * GiB);
  });
});

describe('refused input', () => {
  const ok = reservation('s', 't', 1, at(0), at(1));

  test('a window that ends before it starts', () => {
    assert.throws(() => account([], [], hours(2, 1)), /window ends \(\d+\) before it starts/);
  });

  test('times that are not whole milliseconds', () => {
    assert.throws(() => account([], [], { from: 0.5, to: 1 }), /window start must be whole epoch/);
    assert.throws(
      () => account([{ ...ok, end: Number.NaN }], [], hours(0, 1)),
      /end of shard s must be whole epoch milliseconds/,
    );
    assert.throws(
      () => account([ok], [{ ...sample('s', 0, 1), at: 1.5 }], hours(0, 1)),
      /usage sample time of shard s must be whole epoch milliseconds/,
    );
  });

  test('an interval that ends before it starts', () => {
    assert.throws(
      () => account([reservation('s', 't', 1, at(1), at(0))], [], hours(0, 1)),
      /shard s ends \(\d+\) before it starts/,
    );
  });

  test('overlapping intervals of one shard', () => {
    assert.throws(
      () => account([ok, reservation('s', 't', 1, at(0.5), null)], [], hours(0, 1)),
      /shard s has overlapping reservation intervals/,
    );
    assert.throws(
      () =>
        account(
          [reservation('s', 't', 1, at(0), null), { ...ok, start: at(2), end: at(3) }],
          [],
          hours(0, 1),
        ),
      /shard s has overlapping reservation intervals/,
    );
  });

  test('one shard in two teams', () => {
    assert.throws(
      () => account([ok, reservation('s', 'other', 1, at(1), at(2))], [], hours(0, 1)),
      /shard s belongs to two teams: t and other/,
    );
  });

  test('byte counts that are not Bytes', () => {
    assert.throws(
      () => account([{ ...ok, reservedBytes: -1 as never }], [], hours(0, 1)),
      /shard s has bad reservedBytes -1/,
    );
    assert.throws(
      () => account([ok], [{ ...sample('s', 0, 1), usedBytes: 0.5 as never }], hours(0, 1)),
      /usage sample of shard s has bad usedBytes 0.5/,
    );
  });

  test('empty ids', () => {
    assert.throws(() => shardId(''), /shard id must not be empty/);
    assert.throws(() => teamId(''), /team id must not be empty/);
  });
});

// ---------------------------------------------------------------- properties

const SHARDS = ['s1', 's2', 's3', 's4', 's5'];

/** Per shard: its team and up to three back-to-back or gapped intervals on a 0..1000 ms axis. */
const intervalsArb: fc.Arbitrary<ReservationInterval[]> = fc
  .array(
    fc.record({
      team: fc.constantFrom('t1', 't2'),
      cuts: fc.uniqueArray(fc.integer({ min: 0, max: 1000 }), { minLength: 1, maxLength: 6 }),
      sizes: fc.array(fc.integer({ min: 0, max: 4 * GiB }), { minLength: 3, maxLength: 3 }),
      running: fc.boolean(),
    }),
    { minLength: 1, maxLength: SHARDS.length },
  )
  .map((specs) =>
    specs.flatMap((spec, i) => {
      const cuts = [...spec.cuts].sort((a, b) => a - b);
      const intervals: ReservationInterval[] = [];
      for (let k = 0; k + 1 < cuts.length && intervals.length < 3; k += 1) {
        intervals.push({
          shardId: shardId(SHARDS[i]!),
          teamId: teamId(spec.team),
          reservedBytes: bytes(spec.sizes[intervals.length]!),
          start: cuts[k]!,
          end: cuts[k + 1]!,
        });
      }
      const last = cuts[cuts.length - 1]!;
      if (spec.running) {
        intervals.push({
          shardId: shardId(SHARDS[i]!),
          teamId: teamId(spec.team),
          reservedBytes: bytes(spec.sizes[0]!),
          start: last,
          end: null,
        });
      }
      return intervals;
    }),
  );

const samplesArb: fc.Arbitrary<UsageSample[]> = fc.array(
  fc.record({
    shardId: fc.constantFrom(...SHARDS).map(shardId),
    at: fc.integer({ min: -100, max: 1100 }),
    usedBytes: fc.integer({ min: 0, max: 4 * GiB }).map(bytes),
  }),
  { maxLength: 40 },
);

const splitWindowArb = fc
  .uniqueArray(fc.integer({ min: -50, max: 1050 }), { minLength: 3, maxLength: 3 })
  .map((points) => [...points].sort((a, b) => a - b) as [number, number, number]);

interface Sums {
  reserved: bigint;
  used: bigint;
  peak: number;
}

function sumsById(accounts: readonly (ShardAccount | TeamAccount)[], key: 'shardId' | 'teamId') {
  const out = new Map<string, Sums>();
  for (const a of accounts) {
    const id = key === 'shardId' ? (a as ShardAccount).shardId : a.teamId;
    out.set(id, { reserved: a.reservedByteMs, used: a.usedByteMs, peak: a.peakUsedBytes });
  }
  return out;
}

function combined(left: Map<string, Sums>, right: Map<string, Sums>): Map<string, Sums> {
  const out = new Map(left);
  for (const [id, r] of right) {
    const l = out.get(id);
    out.set(
      id,
      l === undefined
        ? r
        : {
            reserved: l.reserved + r.reserved,
            used: l.used + r.used,
            peak: Math.max(l.peak, r.peak),
          },
    );
  }
  return out;
}

function sortedEntries(map: Map<string, Sums>) {
  return [...map].sort(([a], [b]) => (a < b ? -1 : 1));
}

describe('account (properties)', () => {
  test('a window adds up from any split of it: GiB-hours sum, peaks are the max', () => {
    fc.assert(
      fc.property(
        intervalsArb,
        samplesArb,
        splitWindowArb,
        (intervals, samples, [from, mid, to]) => {
          const whole = account(intervals, samples, { from, to });
          const left = account(intervals, samples, { from, to: mid });
          const right = account(intervals, samples, { from: mid, to });
          for (const key of ['shardId', 'teamId'] as const) {
            const list = key === 'shardId' ? 'shards' : 'teams';
            assert.deepEqual(
              sortedEntries(sumsById(whole[list], key)),
              sortedEntries(combined(sumsById(left[list], key), sumsById(right[list], key))),
            );
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  test('arrival order and repeats of samples do not change the report', () => {
    fc.assert(
      fc.property(
        intervalsArb,
        samplesArb,
        fc.integer({ min: 1, max: 3 }),
        (intervals, samples, copies) => {
          const window = { from: 0, to: 1000 };
          const again = [...samples]
            .reverse()
            .flatMap((s) => Array.from({ length: copies }, () => s));
          assert.deepEqual(account(intervals, again, window), account(intervals, samples, window));
        },
      ),
      { numRuns: 300 },
    );
  });

  test('a team peak is at least each shard peak and at most their sum', () => {
    fc.assert(
      fc.property(intervalsArb, samplesArb, (intervals, samples) => {
        const report = account(intervals, samples, { from: 0, to: 1000 });
        for (const team of report.teams) {
          const peaks = report.shards
            .filter((s) => s.teamId === team.teamId)
            .map((s) => s.peakUsedBytes);
          assert.ok(team.peakUsedBytes >= Math.max(0, ...peaks));
          assert.ok(team.peakUsedBytes <= peaks.reduce((a, b) => a + b, 0));
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('suspendedGibHours', () => {
  const window = { from: 0, to: 3_600_000 };
  test('counts only the part of each stay inside the window', () => {
    const gib = 2 ** 30;
    const hours = suspendedGibHours(
      [
        { shardId: shardId('a'), bytes: bytes(2 * gib), start: -1_800_000, end: 1_800_000 },
        { shardId: shardId('a'), bytes: bytes(2 * gib), start: 3_000_000, end: null },
        { shardId: shardId('b'), bytes: bytes(gib), start: 3_600_000, end: 4_000_000 },
      ],
      window,
    );
    // a: 2 GiB × 0.5 h + 2 GiB × 600 s
    assert.equal(hours.get(shardId('a')), 1 + (2 * 600) / 3600);
    assert.equal(hours.has(shardId('b')), false);
  });
  test('adds up to the byte-time of the stays for any split of the window', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            bytes: fc.integer({ min: 0, max: 2 ** 36 }),
            start: fc.integer({ min: 0, max: 10_000_000 }),
            length: fc.integer({ min: 0, max: 10_000_000 }),
          }),
          { maxLength: 8 },
        ),
        fc.integer({ min: 1, max: 19_999_999 }),
        (stays, cut) => {
          const intervals = stays.map((stay) => ({
            shardId: shardId('s'),
            bytes: bytes(stay.bytes),
            start: stay.start,
            end: stay.start + stay.length,
          }));
          const whole =
            suspendedGibHours(intervals, { from: 0, to: 20_000_000 }).get(shardId('s')) ?? 0;
          const left = suspendedGibHours(intervals, { from: 0, to: cut }).get(shardId('s')) ?? 0;
          const right =
            suspendedGibHours(intervals, { from: cut, to: 20_000_000 }).get(shardId('s')) ?? 0;
          return Math.abs(whole - (left + right)) <= 1e-9 * Math.max(1, whole);
        },
      ),
    );
  });
});

describe('UTC days of a window', () => {
  test('a window from mid-day to mid-day: three days, the ends clipped', () => {
    const days = utcDaysOf(hours(12, 60));
    assert.deepEqual(
      days.map((d) => [d.day, (d.window.from - T0) / HOUR, (d.window.to - T0) / HOUR]),
      [
        ['2026-01-01', 12, 24],
        ['2026-01-02', 24, 48],
        ['2026-01-03', 48, 60],
      ],
    );
  });

  test('a window of whole days has one day each; an empty window has none', () => {
    assert.deepEqual(
      utcDaysOf(hours(0, 48)).map((d) => d.day),
      ['2026-01-01', '2026-01-02'],
    );
    assert.deepEqual(utcDaysOf(hours(5, 5)), []);
  });

  test('refuses a window that ends before it starts, or times that are not whole ms', () => {
    assert.throws(() => utcDaysOf(hours(2, 1)), /ends .* before it starts/);
    assert.throws(() => utcDaysOf({ from: 0.5, to: 10 }), /whole epoch milliseconds/);
  });

  test('the days cover the window without gaps, and per-day accounts add up to the window', () => {
    fc.assert(
      fc.property(
        intervalsArb,
        samplesArb,
        fc.integer({ min: -50, max: 1050 }),
        fc.integer({ min: -50, max: 1050 }),
        (unitIntervals, unitSamples, a, b) => {
          // The arbitraries' 0..1000 axis stretched over about ten days, so windows cross days.
          const scale = 864_017;
          const intervals = unitIntervals.map((i) => ({
            ...i,
            start: i.start * scale,
            end: i.end === null ? null : i.end * scale,
          }));
          const samples = unitSamples.map((x) => ({ ...x, at: x.at * scale }));
          const window = { from: Math.min(a, b) * scale, to: Math.max(a, b) * scale };
          const days = utcDaysOf(window);
          let cursor = window.from;
          for (const { day, window: part } of days) {
            assert.equal(part.from, cursor);
            assert.ok(part.to > part.from);
            assert.equal(new Date(part.from).toISOString().slice(0, 10), day);
            assert.equal(new Date(part.to - 1).toISOString().slice(0, 10), day);
            cursor = part.to;
          }
          assert.equal(cursor, days.length === 0 ? window.from : window.to);
          const whole = account(intervals, samples, window);
          const perDay = days.map((d) => account(intervals, samples, d.window));
          const sum = (pick: (r: AccountingReport) => bigint[]) =>
            perDay.flatMap(pick).reduce((n, x) => n + x, 0n);
          assert.equal(
            sum((r) => r.shards.map((s) => s.reservedByteMs)),
            whole.shards.reduce((n, s) => n + s.reservedByteMs, 0n),
          );
          assert.equal(
            sum((r) => r.shards.map((s) => s.usedByteMs)),
            whole.shards.reduce((n, s) => n + s.usedByteMs, 0n),
          );
        },
      ),
    );
  });
});

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  account,
  shardId,
  teamId,
  type ReservationInterval,
  type UsageSample,
} from './accounting.js';
import {
  type GpuReservation,
  type GpuUsageSample,
  shardIntervalsOf,
  shardSamplesOf,
} from './gpu-accounting.js';
import { bytes, GiB } from './sizes.js';

const HOUR = 3_600_000;
const T0 = Date.UTC(2026, 0, 1);
const S = shardId('s');
const TEAM = teamId('t');

function held(gpu: string, gib: number, start: number, end: number | null): GpuReservation {
  return { shardId: S, teamId: TEAM, gpuUuid: gpu, reservedBytes: bytes(gib * GiB), start, end };
}

function read(gpu: string, at: number, gib: number, shard = S): GpuUsageSample {
  return { shardId: shard, gpuUuid: gpu, at, usedBytes: bytes(gib * GiB) };
}

/** The step function's value at t: the last sample at or before t, else 0. */
function usedAt(samples: readonly UsageSample[], t: number): number {
  let value = 0;
  let latest = -Infinity;
  for (const s of samples) {
    if (s.at <= t && s.at >= latest) {
      value = s.usedBytes;
      latest = s.at;
    }
  }
  return value;
}

function reservedAt(intervals: readonly ReservationInterval[], t: number): number {
  return intervals
    .filter((i) => i.start <= t && (i.end === null || t < i.end))
    .reduce((sum, i) => sum + i.reservedBytes, 0);
}

describe('shardIntervalsOf', () => {
  test('GPUs reserved and released together give one interval of their sum', () => {
    assert.deepEqual(
      shardIntervalsOf([held('a', 10, T0, T0 + HOUR), held('b', 10, T0, T0 + HOUR)]),
      [{ shardId: S, teamId: TEAM, reservedBytes: 20 * GiB, start: T0, end: T0 + HOUR }],
    );
  });

  test('staggered GPUs give one interval per sum; open ones stay open; gaps are left out', () => {
    assert.deepEqual(
      shardIntervalsOf([
        held('a', 8, T0, T0 + 2 * HOUR),
        held('b', 4, T0 + HOUR, null),
        held('c', 2, T0 + 5 * HOUR, T0 + 6 * HOUR),
      ]).map((i) => [i.reservedBytes / GiB, i.start - T0, i.end === null ? null : i.end - T0]),
      [
        [8, 0, HOUR],
        [12, HOUR, 2 * HOUR],
        [4, 2 * HOUR, 5 * HOUR],
        [6, 5 * HOUR, 6 * HOUR],
        [4, 6 * HOUR, null],
      ],
    );
    assert.deepEqual(
      shardIntervalsOf([held('a', 8, T0, T0 + HOUR), held('a', 8, T0 + 2 * HOUR, T0 + 3 * HOUR)])
        .length,
      2,
    );
  });

  test('a released reservation replaced at the same instant by an equal one is one interval', () => {
    assert.equal(
      shardIntervalsOf([held('a', 8, T0, T0 + HOUR), held('b', 8, T0 + HOUR, T0 + 2 * HOUR)])
        .length,
      1,
    );
  });

  test('zero-length reservations hold nothing; bad input is refused', () => {
    assert.deepEqual(shardIntervalsOf([held('a', 8, T0, T0)]), []);
    assert.throws(() => shardIntervalsOf([held('a', 8, T0, T0 - 1)]), RangeError);
    assert.throws(
      () =>
        shardIntervalsOf([
          held('a', 8, T0, null),
          { ...held('b', 8, T0, null), teamId: teamId('u') },
        ]),
      RangeError,
    );
  });

  test('property: at every instant the intervals hold the sum of the GPU reservations', () => {
    const reservation = fc
      .tuple(
        fc.constantFrom('a', 'b', 'c'),
        fc.integer({ min: 1, max: 80 }),
        fc.integer({ min: 0, max: 20 }),
        fc.option(fc.integer({ min: 0, max: 20 })),
      )
      .map(([gpu, gib, start, length]) =>
        held(gpu, gib, T0 + start * HOUR, length === null ? null : T0 + (start + length) * HOUR),
      );
    fc.assert(
      fc.property(fc.array(reservation, { maxLength: 8 }), (reservations) => {
        const intervals = shardIntervalsOf(reservations);
        account(intervals, [], { from: T0, to: T0 + 50 * HOUR }); // refuses overlaps
        for (let h = -1; h <= 45; h++) {
          const t = T0 + h * HOUR;
          const expected = reservations
            .filter((r) => r.start <= t && (r.end === null || t < r.end))
            .reduce((sum, r) => sum + r.reservedBytes, 0);
          assert.equal(reservedAt(intervals, t), expected);
        }
      }),
    );
  });
});

describe('shardSamplesOf', () => {
  test("a shard's usage is the sum of each GPU's latest reading", () => {
    const samples = shardSamplesOf([
      read('a', T0, 4),
      read('b', T0 + HOUR, 2),
      read('a', T0 + 2 * HOUR, 1),
      read('b', T0 + 2 * HOUR, 3),
    ]);
    assert.deepEqual(
      samples.map((s) => [s.at - T0, s.usedBytes / GiB]),
      [
        [0, 4],
        [HOUR, 6],
        [2 * HOUR, 4],
      ],
    );
  });

  test('shards are kept apart; a repeated reading counts once and keeps the larger', () => {
    const samples = shardSamplesOf([
      read('a', T0, 4),
      read('a', T0, 4),
      read('a', T0, 5),
      read('a', T0, 3, shardId('other')),
    ]);
    assert.deepEqual(
      samples.map((s) => [s.shardId, s.usedBytes / GiB]),
      [
        [S, 5],
        ['other', 3],
      ],
    );
  });

  const reading = fc
    .tuple(
      fc.constantFrom('a', 'b', 'c'),
      fc.integer({ min: 0, max: 12 }),
      fc.integer({ min: 0, max: 40 }),
    )
    .map(([gpu, hour, gib]) => read(gpu, T0 + hour * HOUR, gib));

  test('property: the step function is the sum of the GPU step functions, in any order', () => {
    fc.assert(
      fc.property(
        fc.array(reading, { maxLength: 20 }),
        fc.infiniteStream(fc.nat()),
        (readings, keys) => {
          const samples = shardSamplesOf(readings);
          const shuffled = readings
            .map((r) => [keys.next().value as number, r] as const)
            .sort((x, y) => x[0] - y[0])
            .map(([, r]) => r);
          assert.deepEqual(shardSamplesOf([...shuffled, ...shuffled]), samples);
          for (let h = -1; h <= 14; h++) {
            const t = T0 + h * HOUR;
            let expected = 0;
            for (const gpu of ['a', 'b', 'c']) {
              const own = readings.filter((r) => r.gpuUuid === gpu);
              const latest = Math.max(-Infinity, ...own.filter((r) => r.at <= t).map((r) => r.at));
              expected += Math.max(
                0,
                ...own.filter((r) => r.at === latest).map((r) => r.usedBytes),
              );
            }
            assert.equal(usedAt(samples, t), expected);
          }
        },
      ),
    );
  });

  test('property: GPUs held together account like separate shards added up', () => {
    fc.assert(
      fc.property(
        fc.array(reading, { maxLength: 20 }),
        fc.integer({ min: 0, max: 6 }),
        fc.integer({ min: 1, max: 10 }),
        (readings, start, length) => {
          const from = T0 + start * HOUR;
          const to = from + length * HOUR;
          const window = { from: T0 + HOUR, to: T0 + 9 * HOUR };
          const gpus = ['a', 'b', 'c'];
          const whole = account(
            shardIntervalsOf(gpus.map((gpu) => held(gpu, 40, from, to))),
            shardSamplesOf(readings),
            window,
          );
          const apart = account(
            gpus.map((gpu) => ({ ...held(gpu, 40, from, to), shardId: shardId(gpu) })),
            readings.map((r) => ({
              shardId: shardId(r.gpuUuid),
              at: r.at,
              usedBytes: r.usedBytes,
            })),
            window,
          );
          const sum = (key: 'reservedByteMs' | 'usedByteMs') =>
            apart.shards.reduce((total, s) => total + s[key], 0n);
          assert.equal(whole.shards[0]?.reservedByteMs ?? 0n, sum('reservedByteMs'));
          assert.equal(whole.shards[0]?.usedByteMs ?? 0n, sum('usedByteMs'));
          assert.equal(whole.teams[0]?.peakUsedBytes ?? 0, apart.teams[0]?.peakUsedBytes ?? 0);
        },
      ),
    );
  });
});

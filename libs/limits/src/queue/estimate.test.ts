import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bytes, GiB } from '../sizes.js';
import { gpuUuid, hostId } from '../inventory.js';
import type { Placed } from '../placement.js';
import { admit, type Waiting, type WaitReason } from './admission.js';
import { scenarioArb } from '../testing/queue-arbitraries.js';
import { estimateStarts, waitsOnFleet, type StartEstimateInput } from './estimate.js';

const RUNS = 300;
const NOW = 1_000_000;

const SPOT: Placed = {
  kind: 'placed',
  hostId: hostId('host-0'),
  gpuUuids: [gpuUuid('GPU-0-0')],
  bytesPerGpu: bytes(10 * GiB),
  reservedBytesPerGpu: bytes(10 * GiB),
};

const rateArb = fc.option(fc.double({ min: 0.001, max: 100, noNaN: true }), { nil: undefined });
const graceArb = fc.constantFrom(0, 1, 30, 600);
/** A victim's stop: some before now (grace possibly over), some just now. */
const stopArb = fc.integer({ min: NOW - 700_000, max: NOW });

/** Synthetic waiting lists: every reason, spots or none, reclaimed chains and cycles. */
const syntheticArb: fc.Arbitrary<StartEstimateInput> = fc
  .record({
    specs: fc.array(
      fc.record({
        kind: fc.constantFrom<WaitReason['kind']>(
          'capacity',
          'behind',
          'quota',
          'guarantee',
          'reclaiming',
          'reclaimed',
        ),
        target: fc.nat(20),
        spot: fc.boolean(),
        stops: fc.option(fc.array(stopArb, { maxLength: 3 }), { nil: undefined }),
      }),
      { maxLength: 20 },
    ),
    rate: rateArb,
    grace: graceArb,
  })
  .map(({ specs, rate, grace }) => {
    const id = (n: number) => `s-${n}`;
    const waiting: Waiting[] = specs.map((spec, n) => {
      const target = id(spec.target % specs.length);
      const reason: WaitReason =
        spec.kind === 'capacity'
          ? { kind: 'capacity' }
          : spec.kind === 'behind'
            ? { kind: 'behind', shardId: target }
            : spec.kind === 'quota'
              ? { kind: 'quota', message: 'limit' }
              : spec.kind === 'guarantee'
                ? { kind: 'guarantee', message: 'guarantee' }
                : spec.kind === 'reclaiming'
                  ? { kind: 'reclaiming', victimIds: [] }
                  : { kind: 'reclaimed', shardId: target };
      return {
        shardId: id(n),
        reason,
        ...(spec.spot ? { spot: SPOT } : {}),
      };
    });
    const victimStops = new Map<string, number[]>();
    specs.forEach((spec, n) => {
      if (spec.stops !== undefined) victimStops.set(id(n), spec.stops);
    });
    return {
      waiting,
      now: NOW,
      ...(rate === undefined ? {} : { placementsPerSecond: rate }),
      victimStops,
      reclaimGraceSeconds: grace,
    };
  });

/** The waiting shards of real admission plans, with stops for the reclaiming ones. */
const admittedArb: fc.Arbitrary<StartEstimateInput> = fc
  .record({
    scenario: scenarioArb,
    rate: rateArb,
    grace: graceArb,
    stops: fc.array(stopArb, { minLength: 1, maxLength: 4 }),
  })
  .map(({ scenario: s, rate, grace, stops }) => {
    const plan = admit({ ...s });
    const victimStops = new Map<string, number[]>();
    plan.waiting.forEach((w, n) => {
      if (w.reason.kind === 'reclaiming') victimStops.set(w.shardId, stops.slice(0, 1 + (n % 4)));
    });
    return {
      waiting: plan.waiting,
      now: s.now,
      ...(rate === undefined ? {} : { placementsPerSecond: rate }),
      victimStops,
      reclaimGraceSeconds: grace,
    };
  });

const inputArb = fc.oneof(syntheticArb, admittedArb);

function byKind(input: StartEstimateInput, ...kinds: WaitReason['kind'][]): Waiting[] {
  return input.waiting.filter((w) => kinds.includes(w.reason.kind));
}

describe('start estimate properties', () => {
  test('never before now', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        for (const [shardId, at] of estimateStarts(input)) {
          assert.ok(at >= input.now, `${shardId}: ${at} < ${input.now}`);
          assert.ok(Number.isFinite(at));
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('capacity and behind: non-decreasing along the queue, by throughput only', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        const estimates = estimateStarts(input);
        let last = -Infinity;
        for (const w of byKind(input, 'capacity', 'behind')) {
          const at = estimates.get(w.shardId);
          if (input.placementsPerSecond === undefined) {
            assert.equal(at, undefined, `${w.shardId} estimated without a rate`);
            continue;
          }
          assert.notEqual(at, undefined, `${w.shardId} has a rate but no estimate`);
          assert.ok(at! >= last, `${w.shardId} before a shard ahead of it`);
          last = at!;
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('capacity and behind: now + (shards ahead waiting on the fleet + 1) / rate', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        const rate = input.placementsPerSecond;
        if (rate === undefined) return;
        const estimates = estimateStarts(input);
        const ordered = input.waiting;
        ordered.forEach((w, i) => {
          if (w.reason.kind !== 'capacity' && w.reason.kind !== 'behind') return;
          const ahead = ordered.slice(0, i).filter((o) => waitsOnFleet(o.reason)).length;
          assert.equal(estimates.get(w.shardId), input.now + ((ahead + 1) * 1000) / rate);
        });
      }),
      { numRuns: RUNS },
    );
  });

  test('quota and guarantee: never an estimate', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        const estimates = estimateStarts(input);
        for (const w of byKind(input, 'quota', 'guarantee')) {
          assert.equal(estimates.has(w.shardId), false);
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('reclaiming: the last victim deadline (stop + grace), now once past; none without stops or spot', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        const estimates = estimateStarts(input);
        for (const w of byKind(input, 'reclaiming')) {
          const stops = input.victimStops?.get(w.shardId) ?? [];
          if (stops.length === 0 || w.spot === undefined) {
            assert.equal(estimates.has(w.shardId), false);
            continue;
          }
          const deadline = Math.max(...stops) + input.reclaimGraceSeconds * 1000;
          assert.equal(estimates.get(w.shardId), Math.max(input.now, deadline));
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('reclaimed: only after the shard it waits for is estimated, and after it', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        const estimates = estimateStarts(input);
        for (const w of byKind(input, 'reclaimed')) {
          if (w.reason.kind !== 'reclaimed') continue;
          const at = estimates.get(w.shardId);
          const after = estimates.get(w.reason.shardId);
          if (input.placementsPerSecond === undefined || after === undefined) {
            assert.equal(at, undefined, `${w.shardId} estimated without its shard's estimate`);
            continue;
          }
          assert.ok(at !== undefined && at > after, `${w.shardId} not after ${w.reason.shardId}`);
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('deterministic: equal input gives equal estimates, the list untouched', () => {
    fc.assert(
      fc.property(inputArb, (input) => {
        const before = [...input.waiting];
        const a = estimateStarts(input);
        assert.deepEqual(input.waiting, before);
        assert.deepEqual(estimateStarts({ ...input, waiting: [...input.waiting] }), a);
      }),
      { numRuns: RUNS },
    );
  });
});

describe('start estimate examples', () => {
  const wait = (shardId: string, reason: WaitReason, spot = false): Waiting => ({
    shardId,
    reason,
    ...(spot ? { spot: SPOT } : {}),
  });

  test('a queue of every kind, at 0.5 placements per second', () => {
    const estimates = estimateStarts({
      now: NOW,
      placementsPerSecond: 0.5,
      reclaimGraceSeconds: 30,
      victimStops: new Map([['r', [NOW - 10_000, NOW - 5_000]]]),
      waiting: [
        wait('r', { kind: 'reclaiming', victimIds: ['v1', 'v2'] }, true),
        wait('q', { kind: 'quota', message: 'limit' }),
        wait('c1', { kind: 'capacity' }, true),
        wait('v1', { kind: 'reclaimed', shardId: 'r' }),
        wait('b', { kind: 'behind', shardId: 'c1' }),
        wait('g', { kind: 'guarantee', message: 'guarantee' }),
        wait('c2', { kind: 'capacity' }),
      ],
    });
    assert.deepEqual(
      new Map([...estimates].sort()),
      new Map([
        // The last victim was told to stop 5 s ago, with 30 s of grace.
        ['r', NOW + 25_000],
        // One shard waiting on the fleet ahead (r): the second placement from now, 2 s apart.
        ['c1', NOW + 4_000],
        // After r (NOW + 25 s) by one placement; its own turn (the third) would be sooner.
        ['v1', NOW + 27_000],
        ['b', NOW + 8_000],
        ['c2', NOW + 10_000],
      ]),
    );
  });

  test('a cold queue estimates only reclaims; a deadline past gives now', () => {
    const estimates = estimateStarts({
      now: NOW,
      reclaimGraceSeconds: 30,
      victimStops: new Map([['r', [NOW - 60_000]]]),
      waiting: [
        wait('r', { kind: 'reclaiming', victimIds: [] }, true),
        wait('v', { kind: 'reclaimed', shardId: 'r' }),
        wait('c', { kind: 'capacity' }),
      ],
    });
    assert.deepEqual([...estimates], [['r', NOW]]);
  });

  test('a reclaiming shard without a spot, or whose victims are not known, has none', () => {
    const estimates = estimateStarts({
      now: NOW,
      placementsPerSecond: 1,
      reclaimGraceSeconds: 30,
      victimStops: new Map([['lost-room', [NOW]]]),
      waiting: [
        wait('lost-room', { kind: 'reclaiming', victimIds: [] }),
        wait('unknown', { kind: 'reclaiming', victimIds: ['x'] }, true),
        wait('v', { kind: 'reclaimed', shardId: 'unknown' }),
      ],
    });
    assert.deepEqual([...estimates], []);
  });

  test('reclaimed shards waiting on each other have none', () => {
    const estimates = estimateStarts({
      now: NOW,
      placementsPerSecond: 1,
      reclaimGraceSeconds: 0,
      waiting: [
        wait('a', { kind: 'reclaimed', shardId: 'b' }),
        wait('b', { kind: 'reclaimed', shardId: 'a' }),
        wait('c', { kind: 'capacity' }),
      ],
    });
    assert.deepEqual([...estimates], [['c', NOW + 3_000]]);
  });

  test('bad input is refused with what was wrong', () => {
    const base = { now: NOW, reclaimGraceSeconds: 30, waiting: [] };
    assert.throws(() => estimateStarts({ ...base, placementsPerSecond: 0 }), /placementsPerSecond/);
    assert.throws(
      () => estimateStarts({ ...base, placementsPerSecond: NaN }),
      /placementsPerSecond/,
    );
    assert.throws(
      () => estimateStarts({ ...base, reclaimGraceSeconds: -1 }),
      /reclaimGraceSeconds/,
    );
    assert.throws(() => estimateStarts({ ...base, now: Infinity }), /now/);
    assert.throws(
      () =>
        estimateStarts({
          ...base,
          victimStops: new Map([['r', [NaN]]]),
          waiting: [wait('r', { kind: 'reclaiming', victimIds: [] }, true)],
        }),
      /victims/,
    );
  });
});

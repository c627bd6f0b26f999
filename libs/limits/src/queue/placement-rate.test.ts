import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { PlacementRate } from './placement-rate.js';

const MINUTE = 60_000;

function close(actual: number | undefined, expected: number, relative = 1e-9): void {
  assert.notEqual(actual, undefined, 'no rate');
  assert.ok(
    Math.abs(actual! - expected) <= Math.abs(expected) * relative,
    `${actual} is not ${expected}`,
  );
}

describe('placement rate', () => {
  test('cold until the minimum is placed in the window; the first record only starts the measure', () => {
    const rate = new PlacementRate({ minPlacements: 5 });
    assert.equal(rate.perSecond(0), undefined);
    rate.record(10, 0, true);
    assert.equal(rate.perSecond(0), undefined, "the first record's placements do not count");
    for (let i = 1; i <= 4; i++) rate.record(1, i * 1000, true);
    assert.equal(rate.perSecond(4000), undefined, 'four counted');
    rate.record(1, 5000, true);
    close(rate.perSecond(5000), 1);
  });

  test('a steady rate reads as itself, from the first counted placement on', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 1, max: 5 * MINUTE }),
        fc.integer({ min: 5, max: 200 }),
        (placed, everyMs, records) => {
          const rate = new PlacementRate({ minPlacements: 1 });
          rate.record(0, 0, true);
          for (let i = 1; i <= records; i++) rate.record(placed, i * everyMs, true);
          close(rate.perSecond(records * everyMs), (placed * 1000) / everyMs);
        },
      ),
    );
  });

  test('time with nothing waiting on the fleet does not count, nor placements right after it', () => {
    const rate = new PlacementRate({ minPlacements: 1 });
    rate.record(0, 0, true);
    rate.record(2, 1000, false); // 2 placed in 1 s; nothing waits after.
    rate.record(7, 61_000, true); // a minute later: these 7 came out of a wait not measured
    rate.record(2, 62_000, true);
    close(rate.perSecond(62_000), 2);
  });

  test('the wait since the last record counts: a stalled queue slows down', () => {
    const rate = new PlacementRate({ minPlacements: 1 });
    rate.record(0, 0, true);
    rate.record(10, 10_000, true);
    close(rate.perSecond(10_000), 1);
    const later = rate.perSecond(20_000)!;
    assert.ok(later < 1 && later > 0.4, `${later}`);
  });

  test('older placements weigh less, and go cold once out of the window', () => {
    const rate = new PlacementRate({ windowMs: 10 * MINUTE, minPlacements: 5 });
    rate.record(0, 0, true);
    rate.record(10, 10_000, true); // 1/s for 10 s
    rate.record(0, 10 * MINUTE, true); // then nothing for almost 10 minutes
    const slow = rate.perSecond(10 * MINUTE)!;
    assert.ok(slow < 0.05, `${slow}`);
    assert.equal(rate.perSecond(10 * MINUTE + 10_000), undefined, 'out of the window');
  });

  test('a clock stepped back is no negative interval', () => {
    const rate = new PlacementRate({ minPlacements: 1 });
    rate.record(0, 100_000, true);
    rate.record(5, 50_000, true);
    assert.equal(rate.perSecond(50_000), undefined, 'no time passed: no rate');
    rate.record(5, 110_000, true);
    // 10 placed (the 5 of no time, decayed for 10 s, and 5) over 10 s of waiting.
    close(rate.perSecond(110_000), (5 * Math.exp(-10_000 / (10 * MINUTE)) + 5) / 10);
  });

  test('whatever is recorded, a rate is finite and > 0 or none', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            placed: fc.nat(30),
            gap: fc.integer({ min: -5_000, max: 20 * MINUTE }),
            waiting: fc.boolean(),
          }),
          { maxLength: 60 },
        ),
        (records) => {
          const rate = new PlacementRate();
          let at = 0;
          for (const r of records) {
            at += r.gap;
            rate.record(r.placed, at, r.waiting);
            const now = rate.perSecond(at);
            if (now !== undefined) assert.ok(Number.isFinite(now) && now > 0, `${now}`);
          }
        },
      ),
    );
  });

  test('bad input is refused with what was wrong', () => {
    assert.throws(() => new PlacementRate({ windowMs: 0 }), /windowMs/);
    assert.throws(() => new PlacementRate({ minPlacements: 0.5 }), /minPlacements/);
    const rate = new PlacementRate();
    assert.throws(() => rate.record(-1, 0, true), /placed/);
    assert.throws(() => rate.record(1.5, 0, true), /placed/);
    assert.throws(() => rate.record(1, NaN, true), /atMs/);
    assert.throws(() => rate.perSecond(Infinity), /nowMs/);
  });
});

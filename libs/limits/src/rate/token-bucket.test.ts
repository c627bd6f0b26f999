import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { fullBucket, takeToken, type BucketRule, type TokenBucket } from './token-bucket.js';

const rule = fc.record({
  ratePerSecond: fc.double({ min: 0.01, max: 10_000, noNaN: true }),
  burst: fc.integer({ min: 1, max: 10_000 }),
});
/** Non-decreasing times: gaps in milliseconds. */
const gaps = fc.array(fc.integer({ min: 0, max: 5_000 }), { minLength: 1, maxLength: 300 });

function run(r: BucketRule, steps: readonly number[]) {
  let now = 0;
  let bucket: TokenBucket = fullBucket(r, now);
  let allowed = 0;
  const results = [];
  for (const gap of steps) {
    now += gap;
    const result = takeToken(bucket, r, now);
    bucket = result.bucket;
    if (result.allowed) allowed++;
    results.push({ now, result });
  }
  return { allowed, now, results };
}

describe('token bucket', () => {
  test('never admits more than burst + rate × elapsed', () => {
    fc.assert(
      fc.property(rule, gaps, (r, steps) => {
        const { allowed, now } = run(r, steps);
        assert.ok(allowed <= r.burst + (now * r.ratePerSecond) / 1000 + 1e-6);
      }),
    );
  });

  test('a burst of at most `burst` requests at one instant is admitted whole', () => {
    fc.assert(
      fc.property(rule, (r) => {
        const { allowed } = run(
          r,
          Array.from({ length: r.burst }, () => 0),
        );
        assert.equal(allowed, r.burst);
      }),
    );
  });

  test('a refusal says when a token will be there, and then one is', () => {
    fc.assert(
      fc.property(rule, gaps, (r, steps) => {
        let bucket = fullBucket(r, 0);
        let now = 0;
        for (const gap of steps) {
          now += gap;
          const result = takeToken(bucket, r, now);
          bucket = result.bucket;
          if (!result.allowed) {
            assert.ok(result.retryAfterMs >= 1);
            assert.ok(takeToken(bucket, r, now + result.retryAfterMs).allowed);
          }
        }
      }),
    );
  });

  test('the token promised by a refusal is there despite rounding (found by the property above)', () => {
    const r = { ratePerSecond: 0.01, burst: 3 };
    let bucket = fullBucket(r, 0);
    let now = 0;
    for (const gap of [0, 0, 4680, 5, 0]) {
      now += gap;
      const result = takeToken(bucket, r, now);
      bucket = result.bucket;
      if (!result.allowed) assert.ok(takeToken(bucket, r, now + result.retryAfterMs).allowed);
    }
  });

  test('a clock that goes back neither refills nor breaks the bucket', () => {
    const r = { ratePerSecond: 1, burst: 1 };
    const first = takeToken(fullBucket(r, 1000), r, 1000);
    assert.ok(first.allowed);
    const back = takeToken(first.bucket, r, 0);
    assert.equal(back.allowed, false);
  });
});

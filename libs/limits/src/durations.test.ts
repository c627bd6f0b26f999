import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { formatDuration, parseDuration } from './durations.js';

describe('durations', () => {
  test('reads what people type', () => {
    assert.deepEqual(parseDuration('90s'), { ok: true, seconds: 90 });
    assert.deepEqual(parseDuration('30m'), { ok: true, seconds: 1800 });
    assert.deepEqual(parseDuration(' 1h30m '), { ok: true, seconds: 5400 });
    assert.deepEqual(parseDuration('2H'), { ok: true, seconds: 7200 });
    assert.deepEqual(parseDuration('1d'), { ok: true, seconds: 86_400 });
    assert.deepEqual(parseDuration('600'), { ok: true, seconds: 600 });
  });

  test('refuses the rest with a reason and an example', () => {
    for (const bad of [
      '',
      '1.5h',
      '30 min',
      '-5m',
      '1m1h',
      '1h1h',
      'h',
      '1w',
      '99999999999999999d',
    ]) {
      const result = parseDuration(bad);
      assert.equal(result.ok, false, bad);
      assert.match(result.ok ? '' : result.message, /duration|like 90s/);
    }
  });

  test('formatDuration writes the shortest form, and parseDuration reads it back', () => {
    assert.equal(formatDuration(5400), '1h30m');
    assert.equal(formatDuration(60), '1m');
    assert.equal(formatDuration(0), '0s');
    assert.equal(formatDuration(90_061), '1d1h1m1s');
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 10 * 365 * 86_400 }), (seconds) => {
        const text = formatDuration(seconds);
        assert.deepEqual(parseDuration(text), { ok: true, seconds });
        assert.match(text, /^(\d+d)?(\d+h)?(\d+m)?(\d+s)?$/);
      }),
    );
  });
});

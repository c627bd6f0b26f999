import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BadUserInputError } from '../errors/domain-errors.js';
import { parseTimestamp, parseUsageWindow } from './usage-window.js';

describe('parseTimestamp', () => {
  it('reads ISO 8601 with a zone, to the millisecond', () => {
    const cases: [string, string][] = [
      ['2026-01-31T00:00:00Z', '2026-01-31T00:00:00.000Z'],
      ['2026-01-31T00:00Z', '2026-01-31T00:00:00.000Z'],
      ['2026-01-31t12:30:15.5z', '2026-01-31T12:30:15.500Z'],
      ['2026-01-31T12:30:15.123+02:00', '2026-01-31T10:30:15.123Z'],
      ['2026-01-01T00:30:00-01:30', '2026-01-01T02:00:00.000Z'],
      ['2028-02-29T23:59:59.999Z', '2028-02-29T23:59:59.999Z'],
    ];
    for (const [text, expected] of cases) {
      assert.equal(new Date(parseTimestamp(text)!).toISOString(), expected, text);
    }
  });

  it('refuses what is not one exact instant', () => {
    for (const text of [
      '',
      '2026-01-31',
      '2026-01-31T00:00:00',
      '2026-01-31 00:00:00Z',
      '2026-1-31T00:00:00Z',
      '2026-02-29T00:00:00Z',
      '2026-04-31T00:00:00Z',
      '2026-13-01T00:00:00Z',
      '2026-01-31T24:00:00Z',
      '2026-01-31T00:60:00Z',
      '2026-01-31T00:00:60Z',
      '2026-01-31T00:00:00.1234Z',
      '2026-01-31T00:00:00+24:00',
      '2026-01-31T00:00:00+0200',
      '0099-01-01T00:00:00Z',
      '1700000000000',
      ' 2026-01-31T00:00:00Z',
    ]) {
      assert.equal(parseTimestamp(text), null, JSON.stringify(text));
    }
  });
});

describe('parseUsageWindow', () => {
  it('reports every problem at once', () => {
    assert.throws(
      () => parseUsageWindow('soon', 'later'),
      (error: unknown) =>
        error instanceof BadUserInputError &&
        error.problems.map((p) => p.field).join() === 'from,to',
    );
  });

  it('takes up to 31 days, from before to', () => {
    const from = '2026-01-01T00:00:00Z';
    assert.equal(
      parseUsageWindow(from, '2026-02-01T00:00:00Z').to.toISOString(),
      '2026-02-01T00:00:00.000Z',
    );
    assert.throws(() => parseUsageWindow(from, '2026-02-01T00:00:00.001Z'), BadUserInputError);
    assert.throws(() => parseUsageWindow(from, from), BadUserInputError);
  });
});

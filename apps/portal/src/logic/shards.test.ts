import { describe, expect, it } from 'vitest';
import { mergeShards, realBytes, usedBytes } from './shards.js';

describe('mergeShards', () => {
  const a = { id: 'a', state: 'PLACED', createdAt: '2026-01-01T00:00:01Z' };
  const b = { id: 'b', state: 'RUNNING', createdAt: '2026-01-01T00:00:02Z' };
  it('applies events over the listed page, newest first, without DELETED', () => {
    const rows = mergeShards(
      [a, b],
      [
        { ...a, state: 'STARTING' },
        { ...a, state: 'RUNNING' },
        { id: 'c', state: 'PLACED', createdAt: '2026-01-01T00:00:03Z' },
        { ...b, state: 'DELETED' },
      ],
    );
    expect(rows.map((r) => `${r.id}:${r.state}`)).toEqual(['c:PLACED', 'a:RUNNING']);
  });
  it('sums what live GPUs use', () => {
    expect(
      usedBytes([
        { releasedAt: null, used: { bytes: '10' } },
        { releasedAt: '2026-01-01T00:00:00Z', used: { bytes: '5' } },
        { releasedAt: null, used: { bytes: '7' } },
      ]),
    ).toBe(17);
  });
});

describe('realBytes', () => {
  it('sums what the agent measured on live GPUs, unknown until every one reported', () => {
    expect(
      realBytes([
        { releasedAt: null, real: { bytes: '10' } },
        { releasedAt: '2026-01-01T00:00:00Z', real: { bytes: '99' } },
      ]),
    ).toBe(10);
    expect(realBytes([{ releasedAt: null, real: null }])).toBeNull();
    expect(realBytes([])).toBeNull();
  });
});

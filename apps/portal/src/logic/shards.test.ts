import { describe, expect, it } from 'vitest';
import { mergeShards, queueNote, realBytes, usedBytes } from './shards.js';

describe('mergeShards', () => {
  const a = { id: 'a', state: 'PLACED', createdAt: '2026-01-01T00:00:01Z', version: 1 };
  const b = { id: 'b', state: 'RUNNING', createdAt: '2026-01-01T00:00:02Z', version: 3 };
  it('applies events over the listed page, newest first, without DELETED', () => {
    const rows = mergeShards(
      [a, b],
      [
        { ...a, state: 'STARTING', version: 2 },
        { ...a, state: 'RUNNING', version: 3 },
        { id: 'c', state: 'PLACED', createdAt: '2026-01-01T00:00:03Z', version: 1 },
        { ...b, state: 'DELETED', version: 4 },
      ],
    );
    expect(rows.map((r) => `${r.id}:${r.state}`)).toEqual(['c:PLACED', 'a:RUNNING']);
  });
  it('keeps a listed page refetched after a mutation over older events', () => {
    const resized = { ...a, state: 'RUNNING', version: 4 };
    const rows = mergeShards([resized], [{ ...a, state: 'RUNNING', version: 3 }]);
    expect(rows).toEqual([resized]);
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

describe('queueNote', () => {
  const now = new Date('2026-11-27T12:00:00Z');
  const pending = { state: 'PENDING', queuePosition: 3, queueEstimatedStart: null };
  it('says where a waiting shard stands, and nothing for the others', () => {
    expect(queueNote(pending, now)).toBe('#3 in the queue');
    expect(queueNote({ ...pending, queuePosition: null }, now)).toBe('queued');
    expect(queueNote({ ...pending, state: 'RUNNING' }, now)).toBeNull();
  });
  it('adds the estimated start, "any moment" once it has passed', () => {
    const inFive = new Date(now.getTime() + 5 * 60_000).toISOString();
    expect(queueNote({ ...pending, queueEstimatedStart: inFive }, now)).toBe(
      '#3 in the queue, starts in about 5m',
    );
    const past = new Date(now.getTime() - 1_000).toISOString();
    expect(queueNote({ ...pending, queueEstimatedStart: past }, now)).toBe(
      '#3 in the queue, starts any moment',
    );
  });
});

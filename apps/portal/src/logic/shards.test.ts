import { describe, expect, it } from 'vitest';
import { mergeShards, queueNote, realBytes, shardNotices, usedBytes } from './shards.js';

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

describe('shardNotices', () => {
  const event = (at: string, kind: string, action = 'KILL') => ({
    at,
    kind,
    shard: { id: 's1', name: 'train' },
    ungovernedCompute:
      kind === 'UNGOVERNED_COMPUTE'
        ? {
            action,
            killedPids: action === 'KILL' ? [4242] : [],
            message:
              'ungoverned GPU work: pid 4242 ran kernels outside the compute ledger (smUtil 68 % over 5 s)',
          }
        : null,
  });
  it('says in words what the compute fence found and did, newest first; state changes are no notice', () => {
    const notices = shardNotices([
      event('2026-01-01T00:00:01Z', 'STATE'),
      event('2026-01-01T00:00:02Z', 'UNGOVERNED_COMPUTE', 'REPORT'),
      event('2026-01-01T00:00:03Z', 'UNGOVERNED_COMPUTE', 'KILL'),
    ]);
    expect(notices.map((n) => [n.shardName, n.text])).toEqual([
      [
        'train',
        'ungoverned GPU work: pid 4242 ran kernels outside the compute ledger (smUtil 68 % over 5 s): killed 4242',
      ],
      [
        'train',
        'ungoverned GPU work: pid 4242 ran kernels outside the compute ledger (smUtil 68 % over 5 s): reported',
      ],
    ]);
  });
  it('keeps the last five', () => {
    const many = Array.from({ length: 8 }, (_, i) =>
      event(`2026-01-01T00:00:0${i}Z`, 'UNGOVERNED_COMPUTE', 'STOP'),
    );
    const notices = shardNotices(many);
    expect(notices.length).toBe(5);
    expect(notices[0]!.at).toBe('2026-01-01T00:00:07Z');
    expect(notices[0]!.text.endsWith(': the shard is stopped')).toBe(true);
  });
  it('merges the stored history (newest first) with live events, each once by its id', () => {
    const stored = [
      { ...event('2026-01-01T00:00:03Z', 'UNGOVERNED_COMPUTE'), id: '12' },
      {
        id: '10',
        at: '2026-01-01T00:00:01Z',
        kind: 'IDLE',
        shard: { id: 's2', name: 'idler' },
        idle: { idleSeconds: 75 },
      },
    ];
    const live = [
      { ...event('2026-01-01T00:00:03Z', 'UNGOVERNED_COMPUTE'), id: '12' },
      {
        id: '14',
        at: '2026-01-01T00:00:04Z',
        kind: 'VIOLATION',
        shard: { id: 's1', name: 'train' },
        violation: {
          action: 'STOP',
          killedPids: [],
          real: { human: '9 GiB' },
          cap: { human: '8 GiB' },
        },
      },
    ];
    expect(shardNotices([...stored, ...live]).map((n) => [n.key, n.shardName, n.text])).toEqual([
      ['14', 'train', 'GPU memory 9 GiB past its cap of 8 GiB: the shard is stopped'],
      [
        '12',
        'train',
        'ungoverned GPU work: pid 4242 ran kernels outside the compute ledger (smUtil 68 % over 5 s): killed 4242',
      ],
      ['10', 'idler', 'idle: no kernel on any of its GPUs for 75 s: reported'],
    ]);
  });
});

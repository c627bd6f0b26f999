import { describe, expect, it } from 'vitest';
import { explainError } from './errors.js';
import { gpuSegments, teamColor } from './fleet.js';
import {
  age,
  bytesOf,
  canSetCompute,
  canStart,
  canStop,
  fraction,
  gibHours,
  humanBytes,
  parseSizeInput,
} from './format.js';
import { chartSeries, csvField, dayWindows, usageCsv } from './usage.js';

const GiB = 2 ** 30;

describe('format', () => {
  it('reads Bytes scalars and shows them 1024-based', () => {
    expect(bytesOf('12884901888')).toBe(12 * GiB);
    expect(bytesOf(null)).toBe(0);
    expect(humanBytes('12884901888')).toBe('12 GiB');
    expect(humanBytes(1.5 * GiB)).toBe('1.5 GiB');
  });
  it('parses sizes as people type them and refuses the rest with a reason', () => {
    expect(parseSizeInput('12g')).toEqual({ ok: true, bytes: 12 * GiB });
    expect(parseSizeInput('1536m')).toEqual({ ok: true, bytes: 1.5 * GiB });
    const bad = parseSizeInput('12gb');
    expect(bad.ok).toBe(false);
    expect(!bad.ok && bad.message).toMatch(/12g|GiB|1024/i);
    expect(parseSizeInput('50%').ok).toBe(false);
  });
  it('shows ages in the largest whole unit', () => {
    const now = new Date('2026-01-02T00:00:00Z');
    expect(age('2026-01-01T23:59:15Z', now)).toBe('45s');
    expect(age('2026-01-01T23:00:00Z', now)).toBe('1h');
    expect(age('2025-12-29T00:00:00Z', now)).toBe('4d');
    expect(age(null, now)).toBe('—');
  });
  it('clamps gauge fractions and rounds GiB-hours', () => {
    expect(fraction(3, 4)).toBe(0.75);
    expect(fraction(5, 4)).toBe(1);
    expect(fraction(1, 0)).toBe(0);
    expect(gibHours(1.23456)).toBe('1.23');
    expect(gibHours(12345.6)).toBe('12,346');
    expect(gibHours(0.0003)).toBe('< 0.01');
    expect(gibHours(0)).toBe('0');
    expect(canStop('RUNNING')).toBe(true);
    expect(canStop('STOPPED')).toBe(false);
    expect(canSetCompute('PENDING')).toBe(true);
    expect(canSetCompute('RUNNING')).toBe(true);
    expect(canSetCompute('STOPPED')).toBe(false);
  });
  it('offers Start on every shard whose run ended but a deleted one', () => {
    for (const state of ['STOPPED', 'EXITED', 'FAILED', 'PREEMPTED', 'EXPIRED'])
      expect(canStart(state), state).toBe(true);
    for (const state of ['DELETED', 'RUNNING', 'PENDING', 'STOPPING', 'SUSPENDED', 'LOST', 'NEW'])
      expect(canStart(state), state).toBe(false);
  });
});

describe('usage', () => {
  it('splits a window into UTC days, both ends included', () => {
    const days = dayWindows('2026-02-27', '2026-03-01');
    expect(days.map((d) => d.day)).toEqual(['2026-02-27', '2026-02-28', '2026-03-01']);
    expect(days[0]).toEqual({
      day: '2026-02-27',
      from: '2026-02-27T00:00:00.000Z',
      to: '2026-02-28T00:00:00.000Z',
    });
  });
  it('refuses windows the API would refuse, saying why', () => {
    expect(() => dayWindows('2026-03-02', '2026-03-01')).toThrow(/before it starts/);
    expect(() => dayWindows('2026-01-01', '2026-03-01')).toThrow(/at most 31/);
    expect(() => dayWindows('yesterday', '2026-03-01')).toThrow(/not a date/);
  });
  it('shapes chart series in day order', () => {
    const series = chartSeries([
      {
        day: '2026-01-02',
        reservedGibHours: 2,
        usedGibHours: 1.00049,
        suspendedGibHours: 0.5,
        peakUsedBytes: 0,
      },
      {
        day: '2026-01-01',
        reservedGibHours: 4,
        usedGibHours: 3,
        suspendedGibHours: 0,
        peakUsedBytes: 0,
      },
    ]);
    expect(series).toEqual({
      labels: ['2026-01-01', '2026-01-02'],
      reserved: [4, 2],
      used: [3, 1],
      suspended: [0, 0.5],
    });
  });
  it('writes RFC 4180 CSV with a header, quoting what needs it', () => {
    const csv = usageCsv('ml,"x"', [
      {
        day: '2026-01-01',
        reservedGibHours: 4.5,
        usedGibHours: 1,
        suspendedGibHours: 0.25,
        peakUsedBytes: GiB,
      },
    ]);
    expect(csv).toBe(
      'team,day,reserved_gib_hours,used_gib_hours,peak_used_bytes,suspended_gib_hours\r\n' +
        '"ml,""x""",2026-01-01,4.5,1,1073741824,0.25\r\n',
    );
    expect(csvField('plain')).toBe('plain');
  });
});

describe('fleet', () => {
  const gpu = { uuid: 'GPU-a', capacityBytes: 24 * GiB, reservedBytes: 10 * GiB };
  it('splits a GPU bar by team, then unexplained reservations, then free', () => {
    const segments = gpuSegments(gpu, [
      { team: 'ml', gpus: [{ gpuUuid: 'GPU-a', reservedBytes: 4 * GiB, released: false }] },
      { team: 'cv', gpus: [{ gpuUuid: 'GPU-a', reservedBytes: 2 * GiB, released: false }] },
      { team: 'ml', gpus: [{ gpuUuid: 'GPU-a', reservedBytes: 2 * GiB, released: true }] },
      { team: 'nlp', gpus: [{ gpuUuid: 'GPU-b', reservedBytes: 8 * GiB, released: false }] },
    ]);
    expect(segments.map((s) => [s.team, s.bytes / GiB])).toEqual([
      ['ml', 4],
      ['cv', 2],
      ['other', 4],
      [null, 14],
    ]);
    const total = segments.reduce((n, s) => n + s.fraction, 0);
    expect(total).toBeCloseTo(1);
  });
  it('gives each team one colour', () => {
    expect(teamColor('ml')).toBe(teamColor('ml'));
    expect(teamColor('ml')).not.toBe(teamColor('cv'));
  });
});

describe('errors', () => {
  it('names the hosts by id (as the shards table does) and their reasons for NO_CAPACITY', () => {
    const explained = explainError({
      graphQLErrors: [
        {
          message: 'no host can place 1 × 99 GiB',
          extensions: {
            code: 'NO_CAPACITY',
            hosts: [{ hostId: 'h1', hostName: 'box-1', reason: 'needs 99 GiB, 24 GiB free' }],
          },
        },
      ],
    });
    expect(explained.code).toBe('NO_CAPACITY');
    expect(explained.lines[0]).toBe('h1: needs 99 GiB, 24 GiB free');
  });
  it('keeps the quota message (limit and both numbers) and says what to do', () => {
    const explained = explainError({
      graphQLErrors: [
        {
          message: '[GraphQL] shard too large: 16 GiB > limit 8 GiB per shard',
          extensions: { code: 'QUOTA_EXCEEDED' },
        },
      ],
    });
    expect(explained.title).toMatch(/quota/);
    expect(explained.detail).toBe('shard too large: 16 GiB > limit 8 GiB per shard');
    expect(explained.lines.join(' ')).toMatch(/admin/);
  });
  it('tells a refused token from a control plane that does not answer', () => {
    expect(
      explainError({ graphQLErrors: [{ message: 'x', extensions: { code: 'UNAUTHENTICATED' } }] })
        .title,
    ).toMatch(/token/);
    expect(explainError({ networkError: { message: 'Failed to fetch' } }).code).toBe('NETWORK');
  });
});

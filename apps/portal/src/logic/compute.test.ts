import { describe, expect, it } from 'vitest';
import {
  busyRatio,
  computeProblem,
  gpuComputeLabel,
  idleSince,
  parseSharePercent,
  shareLabel,
  teamCompute,
} from './compute.js';

const live = (busy: number | null, lastKernelAt: string | null = null) => ({
  releasedAt: null,
  busyRatio: busy,
  lastKernelAt,
});
const released = { releasedAt: '2026-11-27T00:00:00Z', busyRatio: 0.9, lastKernelAt: null };

describe('compute', () => {
  it('labels a share with its mode, and no share as the default split', () => {
    expect(shareLabel(25, 'CAPPED')).toBe('25% capped');
    expect(shareLabel(40, 'GUARANTEED')).toBe('40% guaranteed');
    expect(shareLabel(null, 'GUARANTEED')).toBe('default split');
    expect(shareLabel(30, 'ISOLATED')).toBe('30% isolated');
  });

  it("labels a GPU's compute, with the isolated partition where its host runs one", () => {
    const gpu = {
      computeGuaranteedPercent: 25,
      computeIsolatedPoolPercent: 0,
      computeIsolatedPercent: 0,
    };
    expect(gpuComputeLabel(gpu)).toBe('compute 25% guaranteed');
    expect(
      gpuComputeLabel({ ...gpu, computeIsolatedPoolPercent: 40, computeIsolatedPercent: 10 }),
    ).toBe('compute 25% guaranteed, isolated 10% of a 40% partition');
  });

  it("sums the team's guaranteed GPU time over live GPUs only", () => {
    const shards = [
      {
        state: 'RUNNING',
        computeSharePercent: 25,
        computeMode: 'CAPPED' as const,
        gpus: [live(0), live(0)],
      },
      {
        state: 'RUNNING',
        computeSharePercent: null,
        computeMode: 'GUARANTEED' as const,
        gpus: [live(0)],
      },
      {
        state: 'STOPPED',
        computeSharePercent: 80,
        computeMode: 'GUARANTEED' as const,
        gpus: [released],
      },
      {
        state: 'RUNNING',
        computeSharePercent: 33,
        computeMode: 'GUARANTEED' as const,
        gpus: [live(0)],
      },
    ];
    expect(teamCompute(shards)).toEqual({ guaranteedGpus: 0.83, gpusHeld: 4 });
    expect(teamCompute([])).toEqual({ guaranteedGpus: 0, gpusHeld: 0 });
  });

  it('averages the busy ratio of live GPUs that report one', () => {
    expect(busyRatio([live(0.5), live(0.1), live(null), released])).toBeCloseTo(0.3);
    expect(busyRatio([live(null)])).toBeNull();
    expect(busyRatio([released])).toBeNull();
  });

  it('is idle since its last kernel on any GPU, its start if none, unknown if not reported', () => {
    const startedAt = '2026-11-27T01:00:00.000Z';
    expect(
      idleSince({
        startedAt,
        gpus: [live(0, '2026-11-27T01:05:00.000Z'), live(0, '2026-11-27T01:07:00.000Z')],
      }),
    ).toBe('2026-11-27T01:07:00.000Z');
    expect(idleSince({ startedAt, gpus: [live(0)] })).toBe(startedAt);
    expect(idleSince({ startedAt, gpus: [live(null)] })).toBeNull();
    expect(idleSince({ startedAt, gpus: [released] })).toBeNull();
  });

  it('reads a typed share: blank is none, whole percents 1-100, CAPPED needs one', () => {
    expect(parseSharePercent('')).toEqual({ ok: true, percent: null });
    expect(parseSharePercent(' 25% ')).toEqual({ ok: true, percent: 25 });
    expect(parseSharePercent('100')).toEqual({ ok: true, percent: 100 });
    for (const bad of ['0', '101', '12.5', 'half', '-5'])
      expect(parseSharePercent(bad).ok).toBe(false);
    expect(computeProblem('', 'GUARANTEED')).toBeNull();
    expect(computeProblem('', 'CAPPED')).toMatch(/capped needs a share/);
    expect(computeProblem('150', 'GUARANTEED')).toMatch(/1 to 100/);
    expect(computeProblem('25', 'CAPPED')).toBeNull();
    expect(computeProblem('', 'ISOLATED')).toMatch(/isolated needs a share/);
    expect(computeProblem('30', 'ISOLATED')).toBeNull();
  });
});

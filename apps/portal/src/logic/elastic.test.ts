import { describe, expect, it } from 'vitest';
import { canResume, canSuspend, memoryNote, moveProgress } from './elastic.js';

const size = (bytes: number) => ({ bytes: String(bytes), human: `${bytes / 2 ** 30} GiB` });
const memory = (where: string, extra: Record<string, unknown> = {}) => ({
  where,
  suspendCause: null,
  resumeWantedAt: null,
  moved: null,
  total: null,
  lastMoveSeconds: null,
  lastError: null,
  ...extra,
});

describe('elastic memory in the portal', () => {
  it('offers Suspend on a running shard and Resume on one going to or in host RAM', () => {
    expect(['RUNNING', 'SUSPENDING', 'SUSPENDED', 'RESUMING', 'STOPPED'].map(canSuspend)).toEqual([
      true,
      false,
      false,
      false,
      false,
    ]);
    expect(['RUNNING', 'SUSPENDING', 'SUSPENDED', 'RESUMING', 'STOPPED'].map(canResume)).toEqual([
      false,
      true,
      true,
      false,
      false,
    ]);
  });

  it("shows a move's progress only while one is under way with a known total", () => {
    expect(
      moveProgress(memory('MOVING_OUT', { moved: size(2 ** 30), total: size(4 * 2 ** 30) })),
    ).toBe(25);
    expect(moveProgress(memory('MOVING_IN', { moved: size(0), total: null }))).toBeNull();
    expect(moveProgress(memory('HOST', { moved: size(2 ** 30), total: size(2 ** 30) }))).toBeNull();
  });

  it('says where the memory is and why', () => {
    expect(memoryNote(memory('GPU'))).toBeNull();
    expect(memoryNote(memory('HOST', { moved: size(2 ** 30), suspendCause: 'make-room' }))).toBe(
      'in host RAM, 1 GiB (idle, to make room)',
    );
    expect(
      memoryNote(memory('HOST', { suspendCause: 'suspend-requested', resumeWantedAt: 'now' })),
    ).toBe('in host RAM (suspended by its team); resuming when its GPU has room');
  });
});

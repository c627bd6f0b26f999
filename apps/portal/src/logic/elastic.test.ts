import { describe, expect, it } from 'vitest';
import { canResume, canSuspend, memoryNote, moveProgress, withProgress } from './elastic.js';

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
    expect(
      memoryNote(
        memory('MOVING_OUT', {
          moved: size(2 ** 30),
          total: size(4 * 2 ** 30),
          suspendCause: 'idle-suspend',
        }),
      ),
    ).toBe('moving to host RAM, 1 GiB of 4 GiB (idle policy)');
    expect(memoryNote(memory('MOVING_IN', { moved: size(0), total: null }))).toBe(
      'moving back to the GPU',
    );
    expect(memoryNote(memory('HOST', { moved: size(2 ** 30), suspendCause: 'make-room' }))).toBe(
      'in host RAM, 1 GiB (idle, to make room)',
    );
    expect(
      memoryNote(memory('HOST', { suspendCause: 'suspend-requested', resumeWantedAt: 'now' })),
    ).toBe('in host RAM (suspended by its team); resuming when its GPU has room');
  });

  it("takes a move's progress read for the row's version and moving state only", () => {
    const row = { id: 's', state: 'SUSPENDING', version: 7, memory: memory('MOVING_OUT') };
    const read = (state: string, version: number) => ({
      state,
      version,
      memory: memory('MOVING_OUT', { moved: size(2 ** 30), total: size(2 * 2 ** 30) }),
    });
    expect(withProgress(row, read('SUSPENDING', 7)).memory.moved).toEqual(size(2 ** 30));
    expect(withProgress(row, read('SUSPENDING', 7)).id).toBe('s');
    expect(withProgress(row, undefined)).toBe(row);
    expect(withProgress(row, read('SUSPENDING', 6)), 'an older read').toBe(row);
    expect(withProgress(row, read('SUSPENDED', 8)), 'the event is newer news').toBe(row);
    const settled = { ...row, state: 'SUSPENDED', version: 8 };
    expect(withProgress(settled, read('SUSPENDED', 8)), 'no move under way').toBe(settled);
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { StandInDriver } from '../testing/checkpoint-stand-in.js';
import { executeMove, type MoveContext } from './memory-move.js';

function contextOf(
  driver: StandInDriver,
  bytes: Record<number, number> = {},
): MoveContext & { marks: string[]; reported: [number, number][] } {
  const marks: string[] = [];
  const reported: [number, number][] = [];
  return {
    api: driver,
    marks,
    reported,
    progress: (completed: number, total: number) => {
      reported.push([completed, total]);
    },
    processes: async () => [...driver.states].map(([pid, state]) => ({ pid, state })),
    mark: async (memory) => {
      marks.push(memory);
      driver.calls.push(`mark ${memory}`);
    },
    bytesOf: (pid) => bytes[pid] ?? 0,
    lockTimeoutMs: 10_000,
  };
}

describe('moving a container’s memory (executor order and undo)', () => {
  it('suspend: marks the file, locks every process, then checkpoints each; progress by the bytes each held', async () => {
    const driver = new StandInDriver({ 11: 'running', 12: 'running' });
    const context = contextOf(driver, { 11: 100, 12: 200 });
    const outcome = await executeMove('suspend', context);
    assert.deepEqual(driver.calls, [
      'mark suspended',
      'lock 11',
      'lock 12',
      'checkpoint 11',
      'checkpoint 12',
    ]);
    assert.ok(outcome.ok);
    assert.equal(outcome.bytes, 300);
    assert.equal(outcome.processes, 2);
    assert.deepEqual(context.reported, [
      [0, 300],
      [100, 300],
      [300, 300],
    ]);
  });

  it('resume: restores every process, unlocks them, then marks the file resident', async () => {
    const driver = new StandInDriver({ 11: 'checkpointed', 12: 'checkpointed' });
    const outcome = await executeMove('resume', contextOf(driver, { 11: 100, 12: 200 }));
    assert.deepEqual(driver.calls, [
      'restore 11',
      'restore 12',
      'unlock 11',
      'unlock 12',
      'mark resident',
    ]);
    assert.ok(outcome.ok);
    assert.equal(outcome.bytes, 300);
  });

  it('a checkpoint the driver refuses half-way is undone: the one moved is restored, all unlocked, the file resident', async () => {
    const driver = new StandInDriver({ 11: 'running', 12: 'running' });
    driver.fail('checkpoint', 12, 'CUDA_ERROR_NOT_SUPPORTED');
    const outcome = await executeMove('suspend', contextOf(driver));
    assert.equal(outcome.ok, false);
    assert.ok(!outcome.ok && !outcome.stuck);
    assert.deepEqual(driver.calls, [
      'mark suspended',
      'lock 11',
      'lock 12',
      'checkpoint 11',
      'restore 11',
      'unlock 11',
      'unlock 12',
      'mark resident',
    ]);
    assert.deepEqual([...driver.states.values()], ['running', 'running']);
    assert.match(
      outcome.reason,
      /cuCheckpointProcessCheckpoint\(pid 12\) returned CUDA_ERROR_NOT_SUPPORTED \(stand-in\): the driver cannot checkpoint this process .*; its memory is back on the GPU/,
    );
  });

  it('a lock that times out leaves its process running; the ones locked are unlocked and the file marked resident again', async () => {
    const driver = new StandInDriver({ 11: 'running', 12: 'running', 13: 'running' });
    driver.fail('lock', 12, 'CUDA_ERROR_NOT_READY');
    const context = contextOf(driver);
    const outcome = await executeMove('suspend', context);
    assert.ok(!outcome.ok);
    assert.deepEqual(driver.calls, ['mark suspended', 'lock 11', 'unlock 11', 'mark resident']);
    assert.deepEqual(context.marks, ['suspended', 'resident']);
    assert.match(outcome.reason, /CUDA_ERROR_NOT_READY .*did not let go of the GPU in time/);
  });

  it('a resume without room on the GPU puts the memory it moved back into host RAM: the shard stays suspended', async () => {
    const driver = new StandInDriver({ 11: 'checkpointed', 12: 'checkpointed' });
    driver.fail('restore', 12, 'CUDA_ERROR_OUT_OF_MEMORY');
    const outcome = await executeMove('resume', contextOf(driver));
    assert.ok(!outcome.ok && !outcome.stuck);
    assert.deepEqual(driver.calls, ['restore 11', 'mark suspended', 'checkpoint 11']);
    assert.deepEqual([...driver.states.values()], ['checkpointed', 'checkpointed']);
    assert.match(
      outcome.reason,
      /its GPU has no room for its memory now.*; its memory stays in host RAM/,
    );
  });

  it('an undo that fails too is said so: the memory is partly moved until the next reconcile', async () => {
    const driver = new StandInDriver({ 11: 'running', 12: 'running' });
    driver.fail('checkpoint', 12, 'CUDA_ERROR_NOT_SUPPORTED');
    driver.fail('restore', 11, 'CUDA_ERROR_OUT_OF_MEMORY');
    const outcome = await executeMove('suspend', contextOf(driver));
    assert.ok(!outcome.ok && outcome.stuck);
    assert.match(outcome.reason, /undoing it failed too .*partly moved/);
    assert.deepEqual([...driver.states.values()], ['checkpointed', 'locked']);
  });

  it('a process that starts during a suspend is moved in another round', async () => {
    const driver = new StandInDriver({ 11: 'running' });
    driver.after = (call) => {
      if (call === 'checkpoint 11') driver.states.set(12, 'running');
    };
    const outcome = await executeMove('suspend', contextOf(driver, { 11: 1, 12: 2 }));
    assert.ok(outcome.ok);
    assert.equal(outcome.processes, 2);
    assert.equal(outcome.bytes, 3);
    assert.deepEqual(driver.calls, [
      'mark suspended',
      'lock 11',
      'checkpoint 11',
      'mark suspended',
      'lock 12',
      'checkpoint 12',
    ]);
  });

  it('a half-done suspend (the agent killed between lock and checkpoint) is finished from where it is', async () => {
    const driver = new StandInDriver({ 11: 'locked', 12: 'checkpointed', 13: 'running' });
    const outcome = await executeMove('suspend', contextOf(driver));
    assert.ok(outcome.ok);
    assert.deepEqual(driver.calls, ['mark suspended', 'lock 13', 'checkpoint 11', 'checkpoint 13']);
  });

  it('a process the driver failed stops the move; the others are brought back', async () => {
    const driver = new StandInDriver({ 11: 'running', 12: 'failed' });
    const outcome = await executeMove('suspend', contextOf(driver));
    assert.ok(!outcome.ok && outcome.stuck);
    assert.match(outcome.reason, /the driver failed process 12 \(CU_PROCESS_STATE_FAILED/);
    assert.deepEqual(driver.calls, ['mark resident']);
  });
});

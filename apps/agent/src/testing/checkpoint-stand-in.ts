import assert from 'node:assert/strict';

import { afterStep, type ProcessCheckpointState } from '@gpushards/limits';

import {
  CheckpointCallError,
  type CheckpointApi,
  type CheckpointCall,
} from '../memory/checkpoint-driver.js';

const ERROR_CODES: Record<string, number> = {
  CUDA_ERROR_NOT_READY: 600,
  CUDA_ERROR_NOT_SUPPORTED: 801,
  CUDA_ERROR_OUT_OF_MEMORY: 2,
  CUDA_ERROR_ILLEGAL_STATE: 401,
};

/**
 * A driver stand-in for the cases the fake driver cannot be made to produce on cue (a lock
 * that times out, a checkpoint the driver refuses half-way, a restore without room, an undo
 * that fails): the states move as cuda.h documents, and `fail` makes one call refuse.
 */
export class StandInDriver implements CheckpointApi {
  readonly libraryPath = 'stand-in';
  readonly calls: string[] = [];
  readonly states: Map<number, ProcessCheckpointState>;
  private readonly failures = new Map<string, string>();
  /** Runs after a call succeeded (a process starting meanwhile). */
  after?: (call: string) => void;

  constructor(states: Record<number, ProcessCheckpointState>) {
    this.states = new Map(Object.entries(states).map(([pid, state]) => [Number(pid), state]));
  }

  fail(call: CheckpointCall, pid: number, errorName: keyof typeof ERROR_CODES): void {
    this.failures.set(`${call} ${pid}`, errorName);
  }

  state(pid: number): Promise<ProcessCheckpointState | undefined> {
    return Promise.resolve(this.states.get(pid));
  }

  lock(pid: number, timeoutMs: number): Promise<void> {
    assert.ok(timeoutMs > 0, 'a lock never waits without a limit');
    return this.move('lock', pid);
  }

  checkpoint(pid: number): Promise<void> {
    return this.move('checkpoint', pid);
  }

  restore(pid: number): Promise<void> {
    return this.move('restore', pid);
  }

  unlock(pid: number): Promise<void> {
    return this.move('unlock', pid);
  }

  private async move(call: CheckpointCall, pid: number): Promise<void> {
    await Promise.resolve(); // a worker thread's answer comes back later
    const failure = this.failures.get(`${call} ${pid}`);
    const before = this.states.get(pid);
    const after = before === undefined ? undefined : afterStep(call, before);
    if (failure !== undefined || after === undefined) {
      const name = failure ?? 'CUDA_ERROR_ILLEGAL_STATE';
      throw new CheckpointCallError(call, pid, ERROR_CODES[name]!, name, 'stand-in');
    }
    this.states.set(pid, after);
    this.calls.push(`${call} ${pid}`);
    this.after?.(`${call} ${pid}`);
  }
}

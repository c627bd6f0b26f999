import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';

import {
  afterStep,
  movePlan,
  observedMemoryOf,
  oppositeOf,
  targetOf,
  type CheckpointProcess,
  type CheckpointStep,
  type MoveDirection,
  type ProcessCheckpointState,
} from './checkpoint.js';

const movable = fc.constantFrom<ProcessCheckpointState>('running', 'locked', 'checkpointed');
const direction = fc.constantFrom<MoveDirection>('suspend', 'resume');
/** Distinct pids, each in a state a move can start from. */
const processes = fc
  .uniqueArray(fc.integer({ min: 1, max: 4_000_000 }), { maxLength: 8 })
  .chain((pids) =>
    fc
      .array(movable, { minLength: pids.length, maxLength: pids.length })
      .map((states) => pids.map((pid, i) => ({ pid, state: states[i]! }))),
  );

interface Run {
  readonly states: Map<number, ProcessCheckpointState>;
  readonly mark: 'suspended' | 'resident' | undefined;
}

/** Executes steps against the driver's model; throws on a step the driver would refuse. */
function execute(
  start: Iterable<CheckpointProcess>,
  steps: readonly CheckpointStep[],
  mark?: 'suspended' | 'resident',
): Run {
  const states = new Map([...start].map((p) => [p.pid, p.state]));
  let marked = mark;
  for (const step of steps) {
    if (step.op === 'mark') {
      marked = step.memory;
      continue;
    }
    const before = states.get(step.pid)!;
    const after = afterStep(step.op, before);
    assert.ok(after !== undefined, `${step.op} of pid ${step.pid} in state ${before}`);
    states.set(step.pid, after);
  }
  return { states, mark: marked };
}

const target = (d: MoveDirection): ProcessCheckpointState =>
  d === 'suspend' ? 'checkpointed' : 'running';

describe('checkpoint plans', () => {
  test('a move from any mix of states is legal at every step and ends with every process where it goes, the file marked', () => {
    fc.assert(
      fc.property(direction, processes, (d, start) => {
        const plan = movePlan(d, start);
        assert.deepEqual(plan.failed, []);
        const run = execute(start, plan.steps);
        for (const state of run.states.values()) assert.equal(state, target(d));
        assert.equal(run.mark, targetOf(d));
        assert.equal(observedMemoryOf([...run.states.values()], run.mark!), targetOf(d));
        assert.equal(plan.steps.filter((s) => s.op === 'mark').length, 1);
      }),
    );
  });

  test('suspend marks before any lock and checkpoints none before the last lock; resume marks resident only after every unlock', () => {
    fc.assert(
      fc.property(direction, processes, (d, start) => {
        const ops = movePlan(d, start).steps.map((s) => s.op);
        const mark = ops.indexOf('mark');
        if (d === 'suspend') {
          assert.equal(mark, 0);
          const firstCheckpoint = ops.indexOf('checkpoint');
          assert.ok(firstCheckpoint === -1 || firstCheckpoint > ops.lastIndexOf('lock'));
        } else {
          assert.equal(mark, ops.length - 1);
          const firstUnlock = ops.indexOf('unlock');
          assert.ok(firstUnlock === -1 || firstUnlock > ops.lastIndexOf('restore'));
        }
      }),
    );
  });

  test('a move that fails at any step is undone by the opposite plan from where it stopped', () => {
    fc.assert(
      fc.property(direction, processes, fc.nat(), (d, start, at) => {
        const steps = movePlan(d, start).steps;
        // The steps before the failure succeeded; the failed call left its process as it was
        // (a lock that timed out leaves it running, as the driver documents).
        const done = execute(start, steps.slice(0, at % (steps.length + 1)));
        const reached = [...done.states].map(([pid, state]) => ({ pid, state }));
        const undo = movePlan(oppositeOf(d), reached);
        const run = execute(reached, undo.steps, done.mark);
        for (const state of run.states.values()) assert.equal(state, target(oppositeOf(d)));
        assert.equal(run.mark, targetOf(oppositeOf(d)));
      }),
    );
  });

  test('a move already done is the mark alone', () => {
    fc.assert(
      fc.property(direction, fc.uniqueArray(fc.integer({ min: 1, max: 99 })), (d, pids) => {
        const start = pids.map((pid) => ({ pid, state: target(d) }));
        assert.deepEqual(movePlan(d, start).steps, [{ op: 'mark', memory: targetOf(d) }]);
      }),
    );
  });

  test('a process the driver failed is named, and the others are still planned', () => {
    const plan = movePlan('suspend', [
      { pid: 10, state: 'running' },
      { pid: 11, state: 'failed' },
    ]);
    assert.deepEqual(plan.failed, [11]);
    assert.deepEqual(plan.steps, [
      { op: 'mark', memory: 'suspended' },
      { op: 'lock', pid: 10 },
      { op: 'checkpoint', pid: 10 },
    ]);
  });

  test('where memory is: all running under a resident file is resident, all checkpointed under a suspended one suspended, anything else partial', () => {
    assert.equal(observedMemoryOf([], 'resident'), 'resident');
    assert.equal(observedMemoryOf([], 'suspended'), 'suspended');
    assert.equal(observedMemoryOf(['running', 'running'], 'resident'), 'resident');
    assert.equal(observedMemoryOf(['running', 'running'], 'suspended'), 'partial');
    assert.equal(observedMemoryOf(['checkpointed'], 'suspended'), 'suspended');
    assert.equal(observedMemoryOf(['checkpointed'], 'resident'), 'partial');
    assert.equal(observedMemoryOf(['locked'], 'suspended'), 'partial');
    assert.equal(observedMemoryOf(['running', 'checkpointed'], 'suspended'), 'partial');
    assert.equal(observedMemoryOf(['checkpointed', 'failed'], 'suspended'), 'partial');
  });
});

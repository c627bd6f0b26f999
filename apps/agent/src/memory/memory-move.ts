import { performance } from 'node:perf_hooks';

import {
  movePlan,
  oppositeOf,
  type CheckpointProcess,
  type CheckpointStep,
  type MoveDirection,
} from '@gpushards/limits';
import { errorMessage } from '@gpushards/protocol';

import type { CheckpointApi } from './checkpoint-driver.js';

/** What one move of a container's memory works with. */
export interface MoveContext {
  readonly api: CheckpointApi;
  /** The container's processes the driver knows, with their states as they are now. */
  processes(): Promise<CheckpointProcess[]>;
  /** Writes the limits file's memory_state. */
  mark(memory: 'suspended' | 'resident'): Promise<void>;
  /**
   * The GPU bytes a process holds on the GPU when it is moved (NVML, before the move): asked for
   * each process a round moves before the round's first call (so before its mark).
   */
  bytesOf(pid: number): number;
  /** After each process's memory moved: bytes moved so far of the total. */
  progress(completedBytes: number, totalBytes: number): void;
  /** How long a lock may wait for a process's CUDA calls to let go. */
  readonly lockTimeoutMs: number;
  /**
   * Called before a round's first checkpoint, once its processes are locked (they start no
   * CUDA call then): a throw stops the move, undone, with its message as the reason.
   */
  beforeCheckpoint?(): Promise<void>;
}

export type MoveOutcome =
  | {
      readonly ok: true;
      /** GPU memory moved, summed over the processes moved. */
      readonly bytes: number;
      readonly seconds: number;
      /** Processes whose memory moved (checkpointed, or restored). */
      readonly processes: number;
    }
  | {
      readonly ok: false;
      /** What failed, and whether undoing it brought every process back. */
      readonly reason: string;
      readonly seconds: number;
      /** Undoing failed too: the memory is partly moved (the next reconcile finishes a move). */
      readonly stuck: boolean;
    };

/**
 * Rounds of planning and executing: a process that starts in the container during a move is
 * found by the next round's reading and moved too; one that keeps coming back this often is
 * a failure.
 */
const MAX_ROUNDS = 3;

/**
 * Moves a container's GPU memory to host RAM (suspend) or back (resume) by libs/limits'
 * movePlan, one driver call at a time, reading the processes again after each round until
 * every one is where the move goes. A call that fails stops the move: the processes are read
 * again and the opposite direction's plan brings them back where the move started from (a
 * suspend's memory back on the GPU, a resume's back in host RAM). Never throws.
 */
export async function executeMove(
  direction: MoveDirection,
  context: MoveContext,
): Promise<MoveOutcome> {
  const started = performance.now();
  const seconds = () => (performance.now() - started) / 1000;
  const perProcess = new Map<number, number>();
  let completed = 0;
  let total = 0;
  for (let round = 0; ; round++) {
    let processes: CheckpointProcess[];
    try {
      processes = await context.processes();
    } catch (error) {
      return undo(direction, context, `cannot read its processes: ${errorMessage(error)}`, seconds);
    }
    const plan = movePlan(direction, processes);
    if (plan.failed.length > 0) {
      return undo(
        direction,
        context,
        `the driver failed process ${plan.failed.join(', ')} (CU_PROCESS_STATE_FAILED: an uncorrectable error in an earlier checkpoint or restore; only restarting it helps)`,
        seconds,
      );
    }
    const calls = plan.steps.filter((step) => step.op !== 'mark');
    if (round > 0 && calls.length === 0) break;
    if (round === MAX_ROUNDS) {
      return undo(
        direction,
        context,
        `new CUDA processes kept starting in the container during ${MAX_ROUNDS} rounds`,
        seconds,
      );
    }
    const moving = calls.filter((step) => step.op === movingOp(direction));
    for (const step of moving) {
      const bytes = context.bytesOf(step.pid);
      perProcess.set(step.pid, bytes);
      total += bytes;
    }
    if (round === 0) context.progress(0, total);
    let checked = false;
    for (const step of plan.steps) {
      try {
        if (step.op === 'checkpoint' && !checked) {
          checked = true;
          await context.beforeCheckpoint?.();
        }
        await run(step, context);
      } catch (error) {
        return undo(direction, context, errorMessage(error), seconds);
      }
      if (step.op === movingOp(direction)) {
        completed += perProcess.get(step.pid) ?? 0;
        context.progress(completed, total);
      }
    }
  }
  return { ok: true, bytes: total, seconds: seconds(), processes: perProcess.size };
}

/** The call that moves a process's memory: checkpoint out, restore back. */
function movingOp(direction: MoveDirection): 'checkpoint' | 'restore' {
  return direction === 'suspend' ? 'checkpoint' : 'restore';
}

async function run(step: CheckpointStep, context: MoveContext): Promise<void> {
  switch (step.op) {
    case 'mark':
      return context.mark(step.memory);
    case 'lock':
      return context.api.lock(step.pid, context.lockTimeoutMs);
    case 'checkpoint':
      return context.api.checkpoint(step.pid);
    case 'restore':
      return context.api.restore(step.pid);
    case 'unlock':
      return context.api.unlock(step.pid);
  }
}

/** Brings every process back where a failed move started from; the outcome says how it went. */
async function undo(
  direction: MoveDirection,
  context: MoveContext,
  failure: string,
  seconds: () => number,
): Promise<MoveOutcome> {
  const back =
    direction === 'suspend' ? 'its memory is back on the GPU' : 'its memory stays in host RAM';
  try {
    const plan = movePlan(oppositeOf(direction), await context.processes());
    for (const step of plan.steps) await run(step, context);
    if (plan.failed.length > 0) {
      return {
        ok: false,
        reason: `${failure}; the driver failed process ${plan.failed.join(', ')}, the others were brought back`,
        seconds: seconds(),
        stuck: true,
      };
    }
    return { ok: false, reason: `${failure}; ${back}`, seconds: seconds(), stuck: false };
  } catch (error) {
    return {
      ok: false,
      reason: `${failure}; undoing it failed too (${errorMessage(error)}): its memory is partly moved until the next reconcile finishes the move`,
      seconds: seconds(),
      stuck: true,
    };
  }
}

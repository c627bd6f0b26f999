import type { ObservedMemory } from './convergence.js';

/**
 * How the agent moves a container's GPU memory through the driver's checkpoint API
 * (docs/elastic.md, "The mechanism"): the order of the calls on each CUDA process, and where a
 * container's memory is by the states the driver reports. The agent executes the steps; when
 * one fails it reads the states again and executes the plan of the opposite direction, which
 * brings every process back where the move started from.
 */

/**
 * One CUDA process as cuCheckpointProcessGetState reports it: running (its memory on the GPU,
 * its calls go on), locked (its calls wait in the driver, memory still on the GPU),
 * checkpointed (its memory in host RAM, its GPU allocations released), failed (the driver hit
 * an uncorrectable error moving it: nothing more can be done with it).
 */
export const PROCESS_CHECKPOINT_STATES = ['running', 'locked', 'checkpointed', 'failed'] as const;
export type ProcessCheckpointState = (typeof PROCESS_CHECKPOINT_STATES)[number];

export interface CheckpointProcess {
  readonly pid: number;
  readonly state: ProcessCheckpointState;
}

/**
 * Where a running container's GPU memory is, by its CUDA processes' states and its limits
 * file's memory_state (`marked`): resident when every process runs and the file says resident,
 * suspended when every one is checkpointed and the file says suspended, partial otherwise (a
 * move that did not finish, or a process the driver failed). A container with no CUDA process
 * is what its file says: a process that starts there while it says suspended waits in
 * libvgpu.so. Every process running under a file still marked suspended is partial too: their
 * next CUDA call would wait (a resume that stopped between the last unlock and the mark).
 */
export function observedMemoryOf(
  states: readonly ProcessCheckpointState[],
  marked: 'suspended' | 'resident',
): ObservedMemory {
  if (states.length === 0) return marked;
  if (states.every((state) => state === 'running')) {
    return marked === 'resident' ? 'resident' : 'partial';
  }
  if (states.every((state) => state === 'checkpointed')) {
    return marked === 'suspended' ? 'suspended' : 'partial';
  }
  return 'partial';
}

export type MoveDirection = 'suspend' | 'resume';

export function oppositeOf(direction: MoveDirection): MoveDirection {
  return direction === 'suspend' ? 'resume' : 'suspend';
}

/** The memory a finished move leaves. */
export function targetOf(direction: MoveDirection): 'suspended' | 'resident' {
  return direction === 'suspend' ? 'suspended' : 'resident';
}

/**
 * One step: a driver call on one process, or `mark`: the limits file's memory_state, which
 * libvgpu.so reads on every hooked call (suspended: the call waits and rings the wake bell).
 */
export type CheckpointStep =
  | { readonly op: 'lock' | 'checkpoint' | 'restore' | 'unlock'; readonly pid: number }
  | { readonly op: 'mark'; readonly memory: 'suspended' | 'resident' };

export interface MovePlan {
  readonly steps: readonly CheckpointStep[];
  /** Processes the driver failed: the move cannot finish while they are there. */
  readonly failed: readonly number[];
}

/**
 * The steps that take every process from where it is to the direction's end.
 *
 * - suspend: mark the limits file suspended, then lock every running process, then checkpoint
 *   every locked one. All are locked before any is checkpointed, so no process of the
 *   container computes against a neighbour whose memory is gone. The mark comes first, so a
 *   call that reaches libvgpu.so from then on (a process that starts meanwhile included)
 *   waits there and asks for a wake: after the locks, a call would wait inside the driver,
 *   where it rings nothing, and a shard left suspended would keep it waiting until someone
 *   else resumed it (a lock waits for a process's running work, so the locks can take long).
 *   A suspend undone (a lock that timed out) ends with the resume plan's mark resident.
 * - resume: restore every checkpointed process, then unlock every locked one, then mark the
 *   file resident: no process goes on before all of the container's memory is back.
 *
 * A process already at a later stage is not moved back first (a suspend that finds a process
 * checkpointed leaves it so), which is what makes a repeated or half-done move finish.
 */
export function movePlan(
  direction: MoveDirection,
  processes: readonly CheckpointProcess[],
): MovePlan {
  const failed = processes.filter((p) => p.state === 'failed').map((p) => p.pid);
  const pids = (...states: ProcessCheckpointState[]) =>
    processes.filter((p) => states.includes(p.state)).map((p) => p.pid);
  const steps: CheckpointStep[] =
    direction === 'suspend'
      ? [
          { op: 'mark', memory: 'suspended' },
          ...pids('running').map((pid) => ({ op: 'lock' as const, pid })),
          ...pids('running', 'locked').map((pid) => ({ op: 'checkpoint' as const, pid })),
        ]
      : [
          ...pids('checkpointed').map((pid) => ({ op: 'restore' as const, pid })),
          ...pids('checkpointed', 'locked').map((pid) => ({ op: 'unlock' as const, pid })),
          { op: 'mark', memory: 'resident' },
        ];
  return { steps, failed };
}

/**
 * What a driver call does to a process's state when it succeeds; undefined when the driver
 * refuses it in that state (CUDA_ERROR_ILLEGAL_STATE). The model the plans are tested against.
 */
export function afterStep(
  op: 'lock' | 'checkpoint' | 'restore' | 'unlock',
  state: ProcessCheckpointState,
): ProcessCheckpointState | undefined {
  switch (op) {
    case 'lock':
      return state === 'running' ? 'locked' : undefined;
    case 'checkpoint':
      return state === 'locked' ? 'checkpointed' : undefined;
    case 'restore':
      return state === 'checkpointed' ? 'locked' : undefined;
    case 'unlock':
      return state === 'locked' ? 'running' : undefined;
  }
}

/**
 * Which state change an event leads to: an agent's report of a shard's container, its host
 * going OFFLINE, its stop done. Every change named here is one the table (transitions.ts)
 * allows; the lifecycle tests check each against it.
 */
import { isFinal, unreachable, type ShardState } from './states.js';
import type { TransitionCause } from './transitions.js';

/** The states an agent reports (libs/protocol SHARD_STATES). */
export const AGENT_REPORTS = [
  'PULLING',
  'STARTING',
  'RUNNING',
  'EXITED',
  'FAILED',
  'STOPPED',
  'VANISHED',
  // Elastic memory: what the agent's checkpoint of the container's processes came to. The
  // container runs throughout; SUSPENDING and RESUMING carry progress only.
  'SUSPENDING',
  'SUSPENDED',
  'SUSPEND_FAILED',
  'RESUMING',
  'RESUMED',
  'RESUME_FAILED',
] as const;

export type AgentReport = (typeof AGENT_REPORTS)[number];

/** Where a STOPPING shard ends once its container is stopped. */
export type StopIntent = 'stop' | 'requeue' | 'preempt';

export interface NextState {
  readonly state: ShardState;
  readonly cause: TransitionCause;
}

/** The state a STOPPING shard takes once its container is stopped. */
export function stoppedStateOf(intent: StopIntent): NextState {
  switch (intent) {
    case 'stop':
      return { state: 'STOPPED', cause: 'stopped' };
    case 'requeue':
      return { state: 'PENDING', cause: 'requeued' };
    case 'preempt':
      return { state: 'PREEMPTED', cause: 'preempted' };
  }
}

/**
 * The states whose shards change when their host goes OFFLINE (nextOnHostLoss), in the order
 * of SHARD_STATES: every state that holds something on the host, a GPU reservation or host RAM
 * for GPU memory (holdsReservation, holdsHostMemory).
 */
export const HOST_LOSS_STATES = [
  'PLACED',
  'STARTING',
  'RUNNING',
  'SUSPENDING',
  'SUSPENDED',
  'RESUMING',
  'STOPPING',
] as const satisfies readonly ShardState[];

/**
 * What a shard becomes when its host goes OFFLINE, holding nothing there afterwards:
 * - PLACED, STARTING, RUNNING: LOST (its container may come back with its host, which the
 *   convergence table settles then), its reservation released;
 * - SUSPENDING, SUSPENDED, RESUMING (elastic, docs/elastic.md): LOST too, since their memory is
 *   in the lost host's processes and RAM, half-moved or not. SUSPENDING and RESUMING release
 *   their reservation, SUSPENDED its suspended cap (gpu.suspended_bytes) and its stay in host
 *   RAM. Their host back with the container running, the agent's report of where its memory
 *   is settles it, each with what it takes again checked against the bounds as they are then
 *   (lostShardReturn): all on the GPU RUNNING, anything else SUSPENDED (the agent finishes a
 *   half-done suspend), or RESUMING when only its GPUs have room for it, or else FAILED;
 * - STOPPING: where its stop intent ends it (its stop can no longer be told): STOPPED, or a
 *   reclaimed one PENDING (requeue) or PREEMPTED (preempt), its reservation released.
 * Undefined for every other state: it holds nothing on the host, and stays as it is.
 */
export function nextOnHostLoss(
  state: ShardState,
  intent: StopIntent = 'stop',
): NextState | undefined {
  switch (state) {
    case 'PLACED':
    case 'STARTING':
    case 'RUNNING':
    case 'SUSPENDING':
    case 'SUSPENDED':
    case 'RESUMING':
      return { state: 'LOST', cause: 'host-offline' };
    case 'STOPPING':
      return intent === 'stop'
        ? { state: 'STOPPED', cause: 'host-offline' }
        : stoppedStateOf(intent);
    case 'PENDING':
    case 'STOPPED':
    case 'EXITED':
    case 'FAILED':
    case 'LOST':
    case 'PREEMPTED':
    case 'EXPIRED':
    case 'DELETED':
      return undefined;
    default:
      return unreachable(state);
  }
}

/**
 * The state change an agent's report leads to, or undefined when it does not apply (a final
 * or queued shard, a start report for a shard already running or stopping). A STOPPING shard
 * ends as its stop intent says however its container ended. A memory report settles only the
 * move it answers (SUSPENDED a SUSPENDING shard, RESUMED a RESUMING one), so a late report of
 * an earlier move changes nothing. No report brings a LOST shard back: its host's return does
 * (register, heartbeat or reconcile, with where the agent finds its memory), which checks that
 * what it takes again still fits (lostShardReturn); a report only ends it (EXITED, FAILED,
 * STOPPED).
 */
export function nextOnReport(
  current: ShardState,
  report: AgentReport,
  intent: StopIntent = 'stop',
): NextState | undefined {
  if (isFinal(current) || current === 'PENDING') return undefined;
  if (current === 'STOPPING') {
    return containerRunsOn(report) ? undefined : stoppedStateOf(intent);
  }
  switch (report) {
    case 'PULLING':
    case 'STARTING':
      return current === 'PLACED' || current === 'STARTING'
        ? { state: 'STARTING', cause: 'launching' }
        : undefined;
    case 'RUNNING':
      switch (current) {
        case 'LOST':
          // Its host's return settles it (lostShardReturn), with room checked.
          return undefined;
        case 'SUSPENDING':
        case 'SUSPENDED':
        case 'RESUMING':
          // The container runs; where its memory is, the memory reports say.
          return undefined;
        default:
          return { state: 'RUNNING', cause: 'started' };
      }
    case 'EXITED':
      return { state: 'EXITED', cause: 'exited' };
    case 'FAILED':
    case 'VANISHED':
      return { state: 'FAILED', cause: 'failed' };
    case 'STOPPED':
      return { state: 'STOPPED', cause: 'stopped' };
    case 'SUSPENDING':
    case 'RESUMING':
      return undefined;
    case 'SUSPENDED':
      return current === 'SUSPENDING' ? { state: 'SUSPENDED', cause: 'suspended' } : undefined;
    case 'SUSPEND_FAILED':
      return current === 'SUSPENDING' ? { state: 'RUNNING', cause: 'suspend-failed' } : undefined;
    case 'RESUMED':
      return current === 'RESUMING' ? { state: 'RUNNING', cause: 'resumed' } : undefined;
    case 'RESUME_FAILED':
      return current === 'RESUMING' ? { state: 'SUSPENDED', cause: 'resume-failed' } : undefined;
  }
}

/** The report says the shard's container still runs (whatever its memory is doing). */
function containerRunsOn(report: AgentReport): boolean {
  switch (report) {
    case 'PULLING':
    case 'STARTING':
    case 'RUNNING':
    case 'SUSPENDING':
    case 'SUSPENDED':
    case 'SUSPEND_FAILED':
    case 'RESUMING':
    case 'RESUMED':
    case 'RESUME_FAILED':
      return true;
    case 'EXITED':
    case 'FAILED':
    case 'STOPPED':
    case 'VANISHED':
      return false;
  }
}

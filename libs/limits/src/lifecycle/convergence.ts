import { isFinal, type ShardState } from './states.js';
import { stoppedStateOf, type NextState, type StopIntent } from './transitions.js';

/**
 * What the host observes of a shard's container (Docker's State.Status, or no container).
 * `exited` carries the exit code.
 */
export type ContainerObservation =
  | { readonly kind: 'absent' }
  | { readonly kind: 'created' }
  | { readonly kind: 'running' }
  | { readonly kind: 'paused' }
  | { readonly kind: 'restarting' }
  | { readonly kind: 'exited'; readonly exitCode: number }
  | { readonly kind: 'dead' }
  | { readonly kind: 'removing' };

export type ContainerKind = ContainerObservation['kind'];

export const CONTAINER_KINDS: readonly ContainerKind[] = [
  'absent',
  'created',
  'running',
  'paused',
  'restarting',
  'exited',
  'dead',
  'removing',
];

/** Reads Docker's State.Status word (unknown words count as dead: not usable, removed). */
export function observationOf(status: string | undefined, exitCode = 0): ContainerObservation {
  switch (status) {
    case undefined:
      return { kind: 'absent' };
    case 'created':
    case 'running':
    case 'paused':
    case 'restarting':
    case 'dead':
    case 'removing':
      return { kind: status };
    case 'exited':
      return { kind: 'exited', exitCode };
    default:
      return { kind: 'dead' };
  }
}

/** What the shard's container should be, by the shard's state. */
export type DesiredContainer = 'run' | 'stopped' | 'none';

/**
 * PLACED, STARTING and RUNNING shards run; a PENDING or DELETED one has no container; every
 * other state keeps its container stopped (logs stay readable; the agent keeps the newest).
 * A LOST shard's container is kept stopped too: the host decides it on its way back.
 */
export function desiredContainerOf(state: ShardState): DesiredContainer {
  switch (state) {
    case 'PLACED':
    case 'STARTING':
    case 'RUNNING':
      return 'run';
    case 'PENDING':
    case 'DELETED':
      return 'none';
    case 'STOPPING':
    case 'STOPPED':
    case 'EXITED':
    case 'FAILED':
    case 'LOST':
    case 'PREEMPTED':
    case 'EXPIRED':
      return 'stopped';
  }
}

/**
 * What the agent does to a container:
 * - `none`: it is as it should be (or Docker is moving it: restarting, removing);
 * - `launch`: create and start a container from the launch spec;
 * - `relaunch`: remove a container that never ran (created) and launch afresh, so it gets
 *   the current caps and a fresh region;
 * - `unpause`, `stop` (keeps it), `remove`.
 */
export type ContainerAction = 'none' | 'launch' | 'relaunch' | 'unpause' | 'stop' | 'remove';

/**
 * The agent's half of the table: what to do to a container given what the shard should have.
 * An exited container of a shard that should run is not started again: the exit is the
 * control plane's to settle (EXITED), so a crashing shard does not restart in a loop.
 */
export function containerActionFor(
  desired: DesiredContainer,
  observed: ContainerKind,
): ContainerAction {
  switch (desired) {
    case 'run':
      switch (observed) {
        case 'absent':
          return 'launch';
        case 'created':
          return 'relaunch';
        case 'paused':
          return 'unpause';
        case 'dead':
          return 'remove';
        case 'running':
        case 'restarting':
        case 'exited':
        case 'removing':
          return 'none';
      }
      break;
    case 'stopped':
      switch (observed) {
        case 'running':
        case 'paused':
        case 'restarting':
          return 'stop';
        case 'dead':
          return 'remove';
        case 'absent':
        case 'created':
        case 'exited':
        case 'removing':
          return 'none';
      }
      break;
    case 'none':
      return observed === 'absent' || observed === 'removing' ? 'none' : 'remove';
  }
}

/** What a shard's state becomes, given its container, and what the agent does. */
export interface Convergence {
  /** Undefined: the state stays. */
  readonly next: NextState | undefined;
  /** Why, for the shard's event and failureReason, when `next` is set. */
  readonly reason?: string;
  readonly exitCode?: number;
  readonly container: ContainerAction;
}

/**
 * The control plane's half of the table: a shard's state given what its host observes of its
 * container, and then the container action for the state it ends in. `intent` says where a
 * STOPPING shard ends (stop: STOPPED; a reclaim: PENDING or PREEMPTED).
 *
 * A LOST shard whose container runs becomes RUNNING by taking its reservation again; when
 * that fails the caller moves it to FAILED instead (and the next round stops the container).
 */
export function converge(
  state: ShardState,
  observed: ContainerObservation,
  intent: StopIntent = 'stop',
): Convergence {
  const next = nextStateOf(state, observed, intent);
  const after = next?.next.state ?? state;
  return {
    ...(next ?? { next: undefined }),
    container: containerActionFor(desiredContainerOf(after), observed.kind),
  };
}

function nextStateOf(
  state: ShardState,
  observed: ContainerObservation,
  intent: StopIntent,
): { next: NextState; reason?: string; exitCode?: number } | undefined {
  if (isFinal(state) || state === 'PENDING') return undefined;
  const kind = observed.kind;
  switch (state) {
    case 'PLACED':
    case 'STARTING':
    case 'RUNNING':
      switch (kind) {
        case 'running':
        case 'paused':
          return state === 'RUNNING' ? undefined : { next: { state: 'RUNNING', cause: 'started' } };
        case 'exited':
          return {
            next: { state: 'EXITED', cause: 'exited' },
            exitCode: observed.exitCode,
            reason: `its container was found stopped by reconciliation (exit code ${observed.exitCode})`,
          };
        case 'dead':
          return { next: { state: 'FAILED', cause: 'failed' }, reason: 'its container is dead' };
        case 'absent':
          // PLACED and STARTING: the agent launches it (it may have crashed before creating it).
          return state === 'RUNNING'
            ? {
                next: { state: 'FAILED', cause: 'failed' },
                reason: 'its container is gone and the agent did not remove it',
              }
            : undefined;
        case 'created':
        case 'restarting':
        case 'removing':
          return undefined;
      }
      break;
    case 'STOPPING':
      switch (kind) {
        case 'running':
        case 'paused':
        case 'restarting':
          return undefined;
        case 'exited':
          return { next: stoppedStateOf(intent), exitCode: observed.exitCode };
        case 'absent':
        case 'created':
        case 'dead':
        case 'removing':
          return { next: stoppedStateOf(intent) };
      }
      break;
    case 'LOST':
      switch (kind) {
        case 'running':
        case 'paused':
          return { next: { state: 'RUNNING', cause: 'recovered' } };
        case 'exited':
          return {
            next: { state: 'EXITED', cause: 'exited' },
            exitCode: observed.exitCode,
            reason: `its container exited with code ${observed.exitCode} while its host was offline`,
          };
        case 'restarting':
          return undefined;
        case 'absent':
        case 'created':
        case 'dead':
        case 'removing':
          return {
            next: { state: 'FAILED', cause: 'host-back-without-it' },
            reason: 'its container was gone when its host came back',
          };
      }
  }
  return undefined;
}

import { isFinal, type ShardState } from './states.js';
import { stoppedStateOf, type NextState, type StopIntent } from './next-state.js';

/**
 * Where the GPU memory of a running container's CUDA processes is, as the agent reads it from
 * the driver's checkpoint state of each process: all on the GPU (or no CUDA process at all),
 * all in host RAM, or in between (some locked or checkpointed: a suspend or resume that did
 * not finish, e.g. the agent was killed mid-way).
 */
export const OBSERVED_MEMORY = ['resident', 'suspended', 'partial'] as const;
export type ObservedMemory = (typeof OBSERVED_MEMORY)[number];

/**
 * What the host observes of a shard's container (Docker's State.Status, or no container).
 * `exited` carries the exit code; `running` and `paused` where its memory is (absent: an agent
 * that does not suspend, so resident).
 */
export type ContainerObservation =
  | { readonly kind: 'absent' }
  | { readonly kind: 'created' }
  | { readonly kind: 'running'; readonly memory?: ObservedMemory }
  | { readonly kind: 'paused'; readonly memory?: ObservedMemory }
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

/**
 * Reads Docker's State.Status word (unknown words count as dead: not usable, removed), with
 * where a running or paused container's memory is.
 */
export function observationOf(
  status: string | undefined,
  exitCode = 0,
  memory?: ObservedMemory,
): ContainerObservation {
  switch (status) {
    case undefined:
      return { kind: 'absent' };
    case 'running':
    case 'paused':
      return memory === undefined ? { kind: status } : { kind: status, memory };
    case 'created':
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

/**
 * What the shard's container should be, by the shard's state. `suspended`: running with its
 * GPU memory in host RAM, and never launched afresh (a new container would not have it).
 */
export type DesiredContainer = 'run' | 'suspended' | 'stopped' | 'none';

/**
 * PLACED, STARTING, RUNNING and RESUMING shards run; SUSPENDING and SUSPENDED ones run
 * suspended; a PENDING or DELETED one has no container; every other state keeps its container
 * stopped (logs stay readable; the agent keeps the newest). A LOST shard's container is kept
 * stopped too: the host decides it on its way back.
 */
export function desiredContainerOf(state: ShardState): DesiredContainer {
  switch (state) {
    case 'PLACED':
    case 'STARTING':
    case 'RUNNING':
    case 'RESUMING':
      return 'run';
    case 'SUSPENDING':
    case 'SUSPENDED':
      return 'suspended';
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
    case 'suspended':
      switch (observed) {
        case 'paused':
          return 'unpause';
        case 'dead':
          return 'remove';
        case 'absent':
        case 'created':
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

/** Where a running shard's GPU memory should be, by its state (undefined: it should not run). */
export type DesiredMemory = 'resident' | 'suspended';

export function desiredMemoryOf(state: ShardState): DesiredMemory | undefined {
  switch (desiredContainerOf(state)) {
    case 'run':
      return 'resident';
    case 'suspended':
      return 'suspended';
    case 'stopped':
    case 'none':
      return undefined;
  }
}

/**
 * What the agent does to a running container's memory: lock and checkpoint every CUDA process
 * (`suspend`), restore and unlock them (`resume`), or nothing. A partial observation is
 * finished in the direction the state wants: a suspend or resume is idempotent per process.
 */
export type MemoryAction = 'none' | 'suspend' | 'resume';

export function memoryActionFor(desired: DesiredMemory, observed: ObservedMemory): MemoryAction {
  switch (desired) {
    case 'resident':
      return observed === 'resident' ? 'none' : 'resume';
    case 'suspended':
      return observed === 'suspended' ? 'none' : 'suspend';
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
  /** What to do to its memory (only while its container runs or is paused). */
  readonly memory: MemoryAction;
}

/**
 * The control plane's half of the table: a shard's state given what its host observes of its
 * container, and then the container action for the state it ends in. `intent` says where a
 * STOPPING shard ends (stop: STOPPED; a reclaim: PENDING or PREEMPTED).
 *
 * A LOST shard whose container runs becomes RUNNING by taking its reservation again,
 * SUSPENDED with its memory in host RAM, or SUSPENDING (its reservation taken again) with it
 * half moved; the caller checks what it takes against the bounds as
 * they are (lostShardReturn), which may end it RESUMING or FAILED instead (and the next round
 * stops a failed one's container).
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
    memory: memoryActionOn(after, observed),
  };
}

function memoryActionOn(state: ShardState, observed: ContainerObservation): MemoryAction {
  if (observed.kind !== 'running' && observed.kind !== 'paused') return 'none';
  const desired = desiredMemoryOf(state);
  return desired === undefined ? 'none' : memoryActionFor(desired, observed.memory ?? 'resident');
}

/** The memory a running or paused container's processes were seen with (resident if unsaid). */
/** The state a LOST shard comes back to by where its memory is (before lostShardReturn). */
const RETURNS_TO: Readonly<Record<ObservedMemory, ShardState>> = {
  resident: 'RUNNING',
  partial: 'SUSPENDING',
  suspended: 'SUSPENDED',
};

function memoryOf(observed: ContainerObservation): ObservedMemory {
  return observed.kind === 'running' || observed.kind === 'paused'
    ? (observed.memory ?? 'resident')
    : 'resident';
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
        case 'dead':
          return endedOnItsOwn(observed);
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
    case 'SUSPENDING':
    case 'SUSPENDED':
    case 'RESUMING':
      switch (kind) {
        case 'running':
        case 'paused':
          return settledMove(state, memoryOf(observed));
        case 'exited':
        case 'dead':
          return endedOnItsOwn(observed);
        case 'absent':
        case 'created':
          return {
            next: { state: 'FAILED', cause: 'failed' },
            reason: 'its container is gone, and its GPU memory with it',
          };
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
          // Memory all on the GPU comes back RUNNING, all in host RAM SUSPENDED, half moved
          // SUSPENDING (the agent finishes the suspend it had begun; what is left on the GPU
          // stays reserved until then). Either way what it takes again must fit:
          // lostShardReturn has the last word (RESUMING or FAILED when it does not).
          return { next: { state: RETURNS_TO[memoryOf(observed)], cause: 'recovered' } };
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

/** A container that should run was found exited or dead. */
function endedOnItsOwn(observed: ContainerObservation): {
  next: NextState;
  reason: string;
  exitCode?: number;
} {
  return observed.kind === 'exited'
    ? {
        next: { state: 'EXITED', cause: 'exited' },
        exitCode: observed.exitCode,
        reason: `its container was found stopped by reconciliation (exit code ${observed.exitCode})`,
      }
    : { next: { state: 'FAILED', cause: 'failed' }, reason: 'its container is dead' };
}

/**
 * A suspend or resume whose end the agent's event did not bring (lost, or the agent restarted):
 * a SUSPENDING shard seen all in host RAM is SUSPENDED, a RESUMING one seen all on the GPU is
 * RUNNING. Anything else stays, and the memory action finishes the move.
 */
function settledMove(
  state: 'SUSPENDING' | 'SUSPENDED' | 'RESUMING',
  memory: ObservedMemory,
): { next: NextState } | undefined {
  switch (state) {
    case 'SUSPENDING':
      return memory === 'suspended'
        ? { next: { state: 'SUSPENDED', cause: 'suspended' } }
        : undefined;
    case 'RESUMING':
      return memory === 'resident' ? { next: { state: 'RUNNING', cause: 'resumed' } } : undefined;
    case 'SUSPENDED':
      return undefined;
  }
}

/**
 * The shard lifecycle: states, what each holds, the allowed transitions with their causes.
 * The control plane's writes and the agent's reconciliation decide every state change here;
 * nothing else does (docs/fleet-and-shards.md shows the tables).
 */

/** Every state a shard can be in, in lifecycle order. */
export const SHARD_STATES = [
  'PENDING', // waits for capacity (the queue); no host, no reservation
  'PLACED', // a host and GPUs chosen, reservation taken; the agent is told to launch it
  'STARTING', // the agent pulls the image, creates and starts the container
  'RUNNING', // its container runs
  'SUSPENDING', // elastic: its processes' GPU memory is being moved to host RAM (still on the GPU)
  'SUSPENDED', // elastic: its container runs with its GPU memory in host RAM; no GPU reservation
  'RESUMING', // elastic: room taken again on its GPUs; its memory is moving back from host RAM
  'STOPPING', // asked to stop (a user, a drain, a reclaim); the agent stops the container
  'STOPPED', // stopped on request
  'EXITED', // its main process ended on its own (exitCode)
  'FAILED', // could not be launched or kept (failureReason)
  'LOST', // its host stopped reporting; it may come back with the host
  'PREEMPTED', // stopped to give its capacity to a shard with a better claim, not requeued
  'EXPIRED', // waited in the queue past its maximum wait
  'DELETED', // deleted by a user; the row stays for accounting
] as const;

export type ShardState = (typeof SHARD_STATES)[number];

const HOLDING: ReadonlySet<ShardState> = new Set([
  'PLACED',
  'STARTING',
  'RUNNING',
  'SUSPENDING',
  'RESUMING',
  'STOPPING',
]);
const QUOTA: ReadonlySet<ShardState> = new Set([
  'PENDING',
  'PLACED',
  'STARTING',
  'RUNNING',
  'SUSPENDING',
  'SUSPENDED',
  'RESUMING',
  'STOPPING',
  'LOST',
]);
const HOST_MEMORY: ReadonlySet<ShardState> = new Set(['SUSPENDING', 'SUSPENDED', 'RESUMING']);
const FINAL: ReadonlySet<ShardState> = new Set([
  'STOPPED',
  'EXITED',
  'FAILED',
  'PREEMPTED',
  'EXPIRED',
  'DELETED',
]);
const TRANSITIONAL: ReadonlySet<ShardState> = new Set([
  'PENDING',
  'PLACED',
  'STARTING',
  'SUSPENDING',
  'RESUMING',
  'STOPPING',
]);

export function isShardState(value: string): value is ShardState {
  return (SHARD_STATES as readonly string[]).includes(value);
}

/**
 * Holds its GPU reservations (shard_gpu rows with releasedAt NULL, counted in the GPUs'
 * reservedBytes): from placement until its container is known to be stopped.
 */
export function holdsReservation(state: ShardState): boolean {
  return HOLDING.has(state);
}

/**
 * Counts against its team's quota: the holding states, a pending shard (the queue is for
 * capacity, not for going past a quota), a suspended one (its cap is still its own: it comes
 * back) and a lost one (its container may come back).
 */
export function countsAgainstQuota(state: ShardState): boolean {
  return QUOTA.has(state);
}

/**
 * Its run is over: the only ways out are DELETED and a user's startShard (back to PENDING: it
 * runs again through the queue); none from DELETED.
 */
export function isFinal(state: ShardState): boolean {
  return FINAL.has(state);
}

/** Passed through on the way somewhere else; stuck when it stays too long. */
export function isTransitional(state: ShardState): boolean {
  return TRANSITIONAL.has(state);
}

/**
 * Holds host RAM for its GPU memory (docs/elastic.md): from the moment its memory starts to
 * leave the GPU until it is back. Counted against the host's budget for suspended shards, by
 * the shard's caps (what it may have on its GPUs), so the budget never depends on a sample.
 */
export function holdsHostMemory(state: ShardState): boolean {
  return HOST_MEMORY.has(state);
}

/**
 * The host's agent is told to run the shard with its memory on the GPU (it is in the reconcile
 * reply's `desired`, and launched when its container is missing).
 */
export function shouldRun(state: ShardState): boolean {
  return state === 'PLACED' || state === 'STARTING' || state === 'RUNNING' || state === 'RESUMING';
}

/**
 * The host's agent is told to keep the shard's container running with its GPU memory in host
 * RAM (the reconcile reply's `suspendedShardIds`): never launched afresh, since its memory
 * lives in its processes.
 */
export function shouldStaySuspended(state: ShardState): boolean {
  return state === 'SUSPENDING' || state === 'SUSPENDED';
}

/** Entering it sets stoppedAt: the shard's run is over. */
export function endsRun(state: ShardState): boolean {
  return FINAL.has(state);
}

export const HOLDING_STATES: readonly ShardState[] = SHARD_STATES.filter(holdsReservation);
export const QUOTA_STATES: readonly ShardState[] = SHARD_STATES.filter(countsAgainstQuota);
export const FINAL_STATES: readonly ShardState[] = SHARD_STATES.filter(isFinal);
export const RUNNABLE_STATES: readonly ShardState[] = SHARD_STATES.filter(shouldRun);
export const SUSPENDED_STATES: readonly ShardState[] = SHARD_STATES.filter(shouldStaySuspended);
export const HOST_MEMORY_STATES: readonly ShardState[] = SHARD_STATES.filter(holdsHostMemory);
export const TRANSITIONAL_STATES: readonly ShardState[] = SHARD_STATES.filter(isTransitional);

/** Exhaustiveness check for switches over states, causes and observations. */
export function unreachable(value: never): never {
  throw new Error(`unhandled value ${String(value)}`);
}

/**
 * The lifecycle's table: every allowed state change and the causes that may take it, what a
 * change does to the shard's reservation, and what startShard does in each state. Which change
 * an event leads to (an agent's report, a host lost, a stop done) is in next-state.ts.
 */
import {
  holdsHostMemory,
  holdsReservation,
  isFinal,
  SHARD_STATES,
  type ShardState,
} from './states.js';

/** Why a shard changes state. */
export const TRANSITION_CAUSES = [
  'queued', // createShard of a request that fits nowhere now: PENDING
  'placed', // placement took a host and GPUs (at create, or from the queue)
  'launching', // the agent pulls, creates or starts its container
  'started', // its container runs (an agent event or reconciliation)
  'exited', // its container's main process ended on its own
  'failed', // the agent could not launch or keep it; its container vanished or died
  'stop-requested', // a user's stopShard or an operator's drain
  'stopped', // its container is stopped (or gone, or its host offline) after a stop
  'host-offline', // its host missed its heartbeats
  'recovered', // its host came back still running it; reservation taken again
  'host-back-without-it', // its host came back without its container
  'reclaim', // its capacity is taken back for a shard with a better claim
  'requeued', // a reclaimed shard's container stopped; it waits in the queue again
  'preempted', // a reclaimed shard's container stopped; it asked not to be requeued
  'expired', // it waited in the queue past its maximum wait
  'deleted', // deleteShard (the row stays)
  'start-requested', // a user's startShard: a shard whose run ended waits in the queue to run again
  // Elastic memory (docs/elastic.md): who asked for a suspend is its cause.
  'suspend-requested', // a user's suspendShard
  'idle-suspend', // its team's idle policy (action suspend)
  'make-room', // the queue: a waiting shard fits once idle elastic shards are suspended
  'suspended', // the agent moved every process's GPU memory to host RAM
  'suspend-failed', // the agent could not (the driver refused, a process used what cannot move)
  'resume-placed', // the queue took room for it again on its own GPUs
  'resumed', // the agent moved its memory back and let its processes go on
  'resume-failed', // the agent could not move it back (the driver refused); it stays suspended
] as const;

export type TransitionCause = (typeof TRANSITION_CAUSES)[number];

type Table = {
  readonly [From in ShardState]: Partial<Record<ShardState, readonly TransitionCause[]>>;
};

const LIVE_END = {
  EXITED: ['exited'],
  FAILED: ['failed'],
  STOPPING: ['stop-requested', 'reclaim'],
  STOPPED: ['stopped'],
  LOST: ['host-offline'],
  DELETED: ['deleted'],
} as const satisfies Partial<Record<ShardState, readonly TransitionCause[]>>;

/** How a shard whose memory is (partly) in host RAM ends: as a running one, but not reclaimed. */
const ELASTIC_END = {
  ...LIVE_END,
  STOPPING: ['stop-requested'],
} as const satisfies Partial<Record<ShardState, readonly TransitionCause[]>>;

/** How a shard whose run is over leaves its state: deleted, or run again by startShard. */
const RUN_AGAIN = {
  PENDING: ['start-requested'],
  DELETED: ['deleted'],
} as const satisfies Partial<Record<ShardState, readonly TransitionCause[]>>;

/** The causes that may start a suspend: the owner, the idle policy, the queue, a reclaim. */
export const SUSPEND_CAUSES = [
  'suspend-requested',
  'idle-suspend',
  'make-room',
  'reclaim',
] as const;
export type SuspendCause = (typeof SUSPEND_CAUSES)[number];

/**
 * Every allowed transition and the causes that may take it. A pair that is not here is
 * refused: the caller has a bug, or a late message that no longer applies.
 */
export const TRANSITIONS: Table = {
  PENDING: { PLACED: ['placed'], EXPIRED: ['expired'], DELETED: ['deleted'] },
  PLACED: { STARTING: ['launching'], RUNNING: ['started'], ...LIVE_END },
  STARTING: { RUNNING: ['started'], ...LIVE_END },
  RUNNING: { SUSPENDING: SUSPEND_CAUSES, ...LIVE_END },
  SUSPENDING: { SUSPENDED: ['suspended'], RUNNING: ['suspend-failed'], ...ELASTIC_END },
  // A suspended shard holds no GPU: a stop needs no wait for its memory (the agent stops its
  // container as for any STOPPED shard).
  SUSPENDED: {
    RESUMING: ['resume-placed'],
    STOPPED: ['stop-requested', 'stopped'],
    EXITED: ['exited'],
    FAILED: ['failed'],
    LOST: ['host-offline'],
    DELETED: ['deleted'],
  },
  RESUMING: { RUNNING: ['resumed'], SUSPENDED: ['resume-failed'], ...ELASTIC_END },
  STOPPING: {
    STOPPED: ['stopped', 'host-offline'],
    PENDING: ['requeued'],
    PREEMPTED: ['preempted'],
    DELETED: ['deleted'],
  },
  // Its host back with its container running (libs/limits lostShardReturn): RUNNING with its
  // memory on the GPU, SUSPENDED with it in host RAM, SUSPENDING with it half moved (its
  // reservation taken again until the agent finishes the suspend), RESUMING when host RAM has
  // no room left for it and its GPUs do.
  LOST: {
    RUNNING: ['recovered'],
    SUSPENDING: ['recovered'],
    SUSPENDED: ['recovered'],
    RESUMING: ['recovered'],
    EXITED: ['exited'],
    FAILED: ['host-back-without-it', 'failed'],
    STOPPED: ['stopped'],
    DELETED: ['deleted'],
  },
  // A run that ended (stopped, exited, failed, preempted, expired in the queue) can be run
  // again by its owner: startShard puts it back in the queue, nothing taken at once.
  STOPPED: RUN_AGAIN,
  EXITED: RUN_AGAIN,
  FAILED: RUN_AGAIN,
  PREEMPTED: RUN_AGAIN,
  EXPIRED: RUN_AGAIN,
  DELETED: {},
};

/** How a new shard starts: in the queue, or placed at once. */
export const INITIAL_STATES: Readonly<Partial<Record<ShardState, readonly TransitionCause[]>>> = {
  PENDING: ['queued'],
  PLACED: ['placed'],
};

/** Causes that take a reservation (every transition from a non-holding to a holding state has one). */
export const ACQUIRING_CAUSES: ReadonlySet<TransitionCause> = new Set([
  'placed',
  'recovered',
  'resume-placed',
]);

/** What a transition does to the shard's GPU reservation. */
export type ReservationChange = 'acquire' | 'release' | 'keep';

export type TransitionCheck =
  | {
      readonly ok: true;
      readonly reservation: ReservationChange;
      /** The run is over: stoppedAt is set. */
      readonly endsRun: boolean;
    }
  | { readonly ok: false; readonly message: string };

export function reservationChange(from: ShardState, to: ShardState): ReservationChange {
  const before = holdsReservation(from);
  const after = holdsReservation(to);
  if (before === after) return 'keep';
  return after ? 'acquire' : 'release';
}

/** The causes that may move a shard from `from` to `to` (empty: not allowed). */
export function causesOf(from: ShardState, to: ShardState): readonly TransitionCause[] {
  return TRANSITIONS[from][to] ?? [];
}

export function canTransition(from: ShardState, to: ShardState, cause?: TransitionCause): boolean {
  const causes = causesOf(from, to);
  return cause === undefined ? causes.length > 0 : causes.includes(cause);
}

/** Whether `cause` may move a shard from `from` to `to`, and what that does. */
export function checkTransition(
  from: ShardState,
  to: ShardState,
  cause: TransitionCause,
): TransitionCheck {
  if (!canTransition(from, to, cause)) {
    const allowed = causesOf(from, to);
    return {
      ok: false,
      message:
        allowed.length === 0
          ? `a ${from} shard cannot become ${to}`
          : `a ${from} shard becomes ${to} only by ${allowed.join(' or ')}, not by ${cause}`,
    };
  }
  return {
    ok: true,
    reservation: reservationChange(from, to),
    endsRun: isFinal(to) && !isFinal(from),
  };
}

/** What startShard does to a shard in a given state. */
export type StartDecision =
  | { readonly kind: 'start' } // → PENDING (start-requested): it waits in the queue again
  | { readonly kind: 'unchanged' } // it already waits or runs (a retried start is harmless)
  | { readonly kind: 'refused'; readonly message: string };

/** startShard leaves these as they are: the shard already waits for its GPUs or has them. */
const STARTED: ReadonlySet<ShardState> = new Set(['PENDING', 'PLACED', 'STARTING', 'RUNNING']);

/**
 * startShard's decision, from the lifecycle table: a shard whose run ended in a state the table
 * lets `start-requested` leave (STOPPED, EXITED, FAILED, PREEMPTED, EXPIRED) starts; one that
 * waits or runs is unchanged; anything else (deleted, on its way somewhere, suspended, lost) is
 * refused with what to do instead.
 */
export function startDecision(state: ShardState): StartDecision {
  if (canTransition(state, 'PENDING', 'start-requested')) return { kind: 'start' };
  if (STARTED.has(state)) return { kind: 'unchanged' };
  const instead =
    state === 'DELETED'
      ? 'a deleted shard stays deleted: create it again'
      : holdsHostMemory(state)
        ? 'resumeShard brings a suspended shard back'
        : state === 'LOST'
          ? 'it comes back with its host, or delete it'
          : 'wait until it has stopped';
  return {
    kind: 'refused',
    message: `a ${state} shard cannot be started (${instead}); startable: ${startableStates().join(', ')}`,
  };
}

/** The states startShard runs again, in lifecycle order. */
export function startableStates(): ShardState[] {
  return SHARD_STATES.filter((state) => canTransition(state, 'PENDING', 'start-requested'));
}

/** Throws on a transition the table does not allow (a bug in the caller). */
export function assertTransition(
  from: ShardState,
  to: ShardState,
  cause: TransitionCause,
): Extract<TransitionCheck, { ok: true }> {
  const check = checkTransition(from, to, cause);
  if (!check.ok) throw new IllegalTransitionError(check.message);
  return check;
}

export class IllegalTransitionError extends Error {
  override name = 'IllegalTransitionError';
}

/** Every allowed (from, to, cause), for tests and documentation. */
export function allTransitions(): { from: ShardState; to: ShardState; cause: TransitionCause }[] {
  return SHARD_STATES.flatMap((from) =>
    Object.entries(TRANSITIONS[from]).flatMap(([to, causes]) =>
      (causes ?? []).map((cause) => ({ from, to: to as ShardState, cause })),
    ),
  );
}

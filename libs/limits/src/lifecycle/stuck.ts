import { TRANSITIONAL_STATES, type ShardState } from './states.js';

/** The states a shard passes through; stuck when it stays in one too long. */
export type TransitionalState =
  'PENDING' | 'PLACED' | 'STARTING' | 'SUSPENDING' | 'RESUMING' | 'STOPPING';

/** Seconds a shard may stay in each transitional state before it counts as stuck; 0: never. */
export type StuckSeconds = Readonly<Record<TransitionalState, number>>;

/**
 * PLACED: the agent takes a launch in a moment. STARTING includes an image pull, which may be
 * long. SUSPENDING and RESUMING move a shard's memory at 2–5 GB/s (an H200 moved 123 GiB out
 * in 65 s and back in 19 s): ten minutes is several times the largest card. STOPPING: the
 * longest stop grace (600 s) and a minute. PENDING: the queue's own maximum wait decides
 * (EXPIRED), so never stuck by default.
 */
export const DEFAULT_STUCK_SECONDS: StuckSeconds = {
  PENDING: 0,
  PLACED: 120,
  STARTING: 900,
  SUSPENDING: 600,
  RESUMING: 600,
  STOPPING: 660,
};

/** What reconciliation does about a stuck shard. */
export type StuckAction =
  /** Send the launch again (idempotent on the agent: a created container is replaced). */
  | 'resend-launch'
  /** Send the stop again. */
  | 'resend-stop'
  /** Send the suspend again (idempotent per process on the agent). */
  | 'resend-suspend'
  /** Send the resume again (idempotent per process on the agent). */
  | 'resend-resume'
  /** Only tell: the queue decides for pending shards. */
  | 'report';

export interface ShardSince {
  readonly id: string;
  readonly state: ShardState;
  /** When it entered its state, ms since the epoch. */
  readonly sinceMs: number;
}

export interface StuckShard {
  readonly id: string;
  readonly state: TransitionalState;
  readonly stuckForMs: number;
  readonly action: StuckAction;
}

export function isTransitionalState(state: ShardState): state is TransitionalState {
  return (TRANSITIONAL_STATES as readonly string[]).includes(state);
}

export function stuckActionOf(state: TransitionalState): StuckAction {
  switch (state) {
    case 'PLACED':
    case 'STARTING':
      return 'resend-launch';
    case 'SUSPENDING':
      return 'resend-suspend';
    case 'RESUMING':
      return 'resend-resume';
    case 'STOPPING':
      return 'resend-stop';
    case 'PENDING':
      return 'report';
  }
}

/** The shards among `shards` that stayed in a transitional state past its limit, oldest first. */
export function stuckShards(
  shards: readonly ShardSince[],
  nowMs: number,
  limits: StuckSeconds = DEFAULT_STUCK_SECONDS,
): StuckShard[] {
  const stuck: StuckShard[] = [];
  for (const shard of shards) {
    if (!isTransitionalState(shard.state)) continue;
    const limit = limits[shard.state];
    if (limit <= 0) continue;
    const stuckForMs = nowMs - shard.sinceMs;
    if (stuckForMs <= limit * 1000) continue;
    stuck.push({
      id: shard.id,
      state: shard.state,
      stuckForMs,
      action: stuckActionOf(shard.state),
    });
  }
  return stuck.sort(
    (a, b) => b.stuckForMs - a.stuckForMs || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
  );
}

/** The shortest enabled limit, in seconds (undefined: detection off). */
export function shortestStuckSeconds(limits: StuckSeconds): number | undefined {
  const enabled = Object.values(limits).filter((seconds) => seconds > 0);
  return enabled.length === 0 ? undefined : Math.min(...enabled);
}

export type StuckSecondsParse =
  | { readonly ok: true; readonly limits: StuckSeconds }
  | { readonly ok: false; readonly message: string };

const MAX_STUCK_SECONDS = 7 * 24 * 3600;

/**
 * Reads `STATE=seconds,...` (for example `PLACED=60,STOPPING=300`); states not named keep
 * their default; 0 turns detection off for that state.
 */
export function parseStuckSeconds(
  text: string,
  defaults: StuckSeconds = DEFAULT_STUCK_SECONDS,
): StuckSecondsParse {
  const limits: Record<TransitionalState, number> = { ...defaults };
  for (const part of text
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '')) {
    const match = /^([A-Z]+)=(\d{1,7})$/.exec(part);
    const state = match?.[1] as ShardState | undefined;
    if (match === null || state === undefined || !isTransitionalState(state)) {
      return {
        ok: false,
        message: `expected STATE=seconds with STATE one of ${TRANSITIONAL_STATES.join(', ')}, got "${part}"`,
      };
    }
    const seconds = Number(match[2]);
    if (seconds > MAX_STUCK_SECONDS) {
      return {
        ok: false,
        message: `${state} must be at most ${MAX_STUCK_SECONDS} seconds, got ${seconds}`,
      };
    }
    limits[state] = seconds;
  }
  return { ok: true, limits };
}

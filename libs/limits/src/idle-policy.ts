/**
 * The idle policy (issue 17): a running shard that holds GPU memory and launches no kernel is
 * reported, and, if its team's policy says so, stopped. The control plane loads the shards and
 * their last kernel (from the agents' compute ledgers), asks `decideIdle`, and applies the
 * actions in one conditional transaction.
 *
 * - A shard is *observed* when its host reports compute activity for it (a host without a
 *   compute ledger does not: such shards are never judged idle).
 * - Its idle time runs from its last kernel on any of its GPUs, or from its start when it never
 *   launched one.
 * - At `idleAfterSeconds` it is reported once (`report`: the IDLE event, the warning before any
 *   action). A kernel after the report clears it (`clear`).
 * - At `stopAfterSeconds` (≥ idleAfterSeconds) it is stopped (`stop`), but only once it was
 *   reported: the report always comes first, in an earlier pass, so every stop has an event
 *   before it as well as the one at the action.
 * - An elastic shard (docs/elastic.md) is suspended instead at `suspendAfterSeconds`
 *   (≥ idleAfterSeconds; `suspend`, after its report like a stop): its memory goes to host RAM
 *   and its work is kept, so an elastic shard is never stopped by a policy that suspends. A
 *   shard that is not elastic is never suspended by the policy; `stopAfterSeconds` still
 *   applies to it.
 */

export interface IdlePolicy {
  /** Seconds without a kernel before a shard is reported idle; at least MIN_IDLE_SECONDS. */
  readonly idleAfterSeconds: number;
  /** Seconds without a kernel before it is stopped; absent: reported only. */
  readonly stopAfterSeconds?: number;
  /** Seconds without a kernel before an elastic shard is suspended; absent: never. */
  readonly suspendAfterSeconds?: number;
}

/** Shorter idle times are noise: a training job's data loading or checkpoint can pause a minute. */
export const MIN_IDLE_SECONDS = 60;
/** A week: longer is as good as no policy. */
export const MAX_IDLE_SECONDS = 7 * 24 * 3600;

export interface IdleShard {
  readonly shardId: string;
  /** ms since the epoch; the shard's start (its first). */
  readonly startedAt: number;
  /** ms since the epoch: its last kernel on any GPU; null: none reported. */
  readonly lastKernelAt: number | null;
  /** Whether its host reports compute activity for it. */
  readonly observed: boolean;
  /** ms since the epoch: the idle start it was reported with; null: not reported. */
  readonly idleSince: number | null;
  /** An elastic shard (its team allows it): suspended by the policy rather than stopped. */
  readonly elastic?: boolean;
}

export type IdleAction =
  | {
      readonly kind: 'report';
      readonly shardId: string;
      readonly idleSince: number;
      readonly idleSeconds: number;
    }
  | {
      readonly kind: 'stop' | 'suspend';
      readonly shardId: string;
      readonly idleSince: number;
      readonly idleSeconds: number;
    }
  | { readonly kind: 'clear'; readonly shardId: string };

/** Why a policy is not one, or undefined when it is. */
export function idlePolicyProblem(
  policy: IdlePolicy,
): { field: string; message: string } | undefined {
  const { idleAfterSeconds } = policy;
  if (
    !Number.isSafeInteger(idleAfterSeconds) ||
    idleAfterSeconds < MIN_IDLE_SECONDS ||
    idleAfterSeconds > MAX_IDLE_SECONDS
  ) {
    return {
      field: 'idleAfterSeconds',
      message: `must be a whole number of seconds from ${MIN_IDLE_SECONDS} to ${MAX_IDLE_SECONDS}, got ${idleAfterSeconds}`,
    };
  }
  for (const field of ['stopAfterSeconds', 'suspendAfterSeconds'] as const) {
    const seconds = policy[field];
    if (seconds === undefined) continue;
    if (
      !Number.isSafeInteger(seconds) ||
      seconds < idleAfterSeconds ||
      seconds > MAX_IDLE_SECONDS
    ) {
      return {
        field,
        message: `must be a whole number of seconds from idleAfterSeconds (${idleAfterSeconds}) to ${MAX_IDLE_SECONDS}, got ${seconds}`,
      };
    }
  }
  return undefined;
}

/** The action the policy takes on a reported shard idle this long, if any. */
function actionAfter(
  policy: IdlePolicy,
  shard: IdleShard,
  idleSeconds: number,
): 'stop' | 'suspend' | undefined {
  if (shard.elastic === true && policy.suspendAfterSeconds !== undefined) {
    return idleSeconds >= policy.suspendAfterSeconds ? 'suspend' : undefined;
  }
  return policy.stopAfterSeconds !== undefined && idleSeconds >= policy.stopAfterSeconds
    ? 'stop'
    : undefined;
}

/** When the shard's idle time started: its last kernel, else its start. */
export function idleStart(shard: IdleShard): number {
  return shard.lastKernelAt ?? shard.startedAt;
}

/** What to do with each running shard of one team at `now` (ms); shards needing nothing are left out. */
export function decideIdle(
  shards: readonly IdleShard[],
  policy: IdlePolicy,
  now: number,
): IdleAction[] {
  const actions: IdleAction[] = [];
  for (const shard of shards) {
    if (!shard.observed) {
      if (shard.idleSince !== null) actions.push({ kind: 'clear', shardId: shard.shardId });
      continue;
    }
    const since = idleStart(shard);
    const idleSeconds = Math.max(0, (now - since) / 1000);
    const reported = shard.idleSince !== null && shard.idleSince === since;
    if (idleSeconds < policy.idleAfterSeconds) {
      // Busy again (or the policy grew): a report about an earlier idle spell no longer holds.
      if (shard.idleSince !== null) actions.push({ kind: 'clear', shardId: shard.shardId });
      continue;
    }
    if (!reported) {
      actions.push({ kind: 'report', shardId: shard.shardId, idleSince: since, idleSeconds });
      continue;
    }
    const kind = actionAfter(policy, shard, idleSeconds);
    if (kind !== undefined)
      actions.push({ kind, shardId: shard.shardId, idleSince: since, idleSeconds });
  }
  return actions;
}

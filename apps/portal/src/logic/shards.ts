/** The live shards table: the listed page, updated by shardEvents as they arrive. */
import { age } from './format.js';

export interface ShardLike {
  readonly id: string;
  readonly state: string;
  readonly createdAt: string;
  /** Bumped by every change of the shard (state, resize): the higher one is the newer. */
  readonly version: number;
}

/**
 * The rows to show: each shard's newest version (the higher `version`, whether from the listed
 * page, refetched after a mutation, or from an event; events for shards not listed add them),
 * DELETED ones left out, newest first.
 */
export function mergeShards<T extends ShardLike>(listed: readonly T[], events: readonly T[]): T[] {
  const byId = new Map<string, T>();
  for (const shard of [...listed, ...events]) {
    const known = byId.get(shard.id);
    if (known === undefined || known.version <= shard.version) byId.set(shard.id, shard);
  }
  return [...byId.values()]
    .filter((s) => s.state !== 'DELETED')
    .sort((a, b) => b.createdAt.localeCompare(a.createdAt) || a.id.localeCompare(b.id));
}

/** Sum of what a shard uses now over its live GPUs. */
export function usedBytes(
  gpus: readonly { releasedAt: string | null; used: { bytes: string } }[],
): number {
  return gpus.filter((g) => g.releasedAt === null).reduce((n, g) => n + Number(g.used.bytes), 0);
}

/** Sum of what a shard really holds now (NVML, by the agent) over its live GPUs; null if unknown. */
export function realBytes(
  gpus: readonly { releasedAt: string | null; real?: { bytes: string } | null }[],
): number | null {
  const live = gpus.filter((g) => g.releasedAt === null);
  if (live.length === 0 || live.some((g) => !g.real)) return null;
  return live.reduce((n, g) => n + Number(g.real!.bytes), 0);
}

/** What the table says of a PENDING shard: its place in the queue and, when known, its start. */
export function queueNote(
  shard: {
    readonly state: string;
    readonly queuePosition: number | null;
    readonly queueEstimatedStart: string | null;
  },
  now: Date = new Date(),
): string | null {
  if (shard.state !== 'PENDING') return null;
  const place = shard.queuePosition === null ? 'queued' : `#${shard.queuePosition} in the queue`;
  if (shard.queueEstimatedStart === null) return place;
  const seconds = Math.floor(
    (new Date(shard.queueEstimatedStart).getTime() - now.getTime()) / 1000,
  );
  if (seconds <= 0) return `${place}, starts any moment`;
  return `${place}, starts in about ${age(new Date(now.getTime() - seconds * 1000), now)}`;
}

/**
 * A shard event as the notices need it (ShardEvent's fields, live or from the history): what
 * NoticeFields and the event's shard select (libs/graphql-client, events.graphql).
 */
export interface NoticeEvent {
  /** The stored event's id: the same live and in the history (null: not stored). */
  readonly id?: string | null;
  readonly at: string;
  readonly kind: string;
  readonly shard: { readonly id: string; readonly name: string };
  readonly ungovernedCompute?: {
    readonly action: string;
    readonly killedPids: readonly number[];
    readonly message: string;
  } | null;
  readonly violation?: {
    readonly action: string;
    readonly killedPids: readonly number[];
    readonly real: { readonly human: string };
    readonly cap: { readonly human: string };
  } | null;
  readonly idle?: { readonly idleSeconds: number } | null;
}

/** Notices kept in the list; the oldest go first. */
export const MAX_NOTICES = 5;

/** The kinds of shard event that are notices (what teamShardEvents is asked for). */
export const NOTICE_KINDS = ['UNGOVERNED_COMPUTE', 'VIOLATION', 'IDLE', 'IDLE_STOP'] as const;

function whatWasDone(action: string, killedPids: readonly number[]): string {
  if (action === 'KILL') return `killed ${killedPids.join(', ') || 'nothing'}`;
  if (action === 'STOP') return 'the shard is stopped';
  return 'reported';
}

function duration(seconds: number): string {
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${Math.round(seconds / 3600)} h`;
}

function noticeText(event: NoticeEvent): string | null {
  const found = event.ungovernedCompute;
  if (event.kind === 'UNGOVERNED_COMPUTE' && found) {
    return `${found.message}: ${whatWasDone(found.action, found.killedPids)}`;
  }
  const violation = event.violation;
  if (event.kind === 'VIOLATION' && violation) {
    return `GPU memory ${violation.real.human} past its cap of ${violation.cap.human}: ${whatWasDone(violation.action, violation.killedPids)}`;
  }
  if ((event.kind === 'IDLE' || event.kind === 'IDLE_STOP') && event.idle) {
    const quiet = `idle: no kernel on any of its GPUs for ${duration(event.idle.idleSeconds)}`;
    return event.kind === 'IDLE_STOP'
      ? `${quiet}: stopped by its team's idle policy`
      : `${quiet}: reported`;
  }
  return null;
}

/**
 * The notices to show above the shards: events that are no state change and say something
 * people must read (the compute fence found GPU work outside the compute ledger, the memory
 * fence a shard past its cap, the idle policy an idle shard), from the stored history and heard
 * live in any order, each once (by its id), newest first, at most MAX_NOTICES.
 */
export function shardNotices(
  events: readonly NoticeEvent[],
): { key: string; shardName: string; at: string; text: string }[] {
  const byKey = new Map<string, { key: string; shardName: string; at: string; text: string }>();
  for (const event of events) {
    const text = noticeText(event);
    if (text === null) continue;
    const key = event.id ?? `${event.shard.id}|${event.at}|${event.kind}`;
    byKey.set(key, { key, shardName: event.shard.name, at: event.at, text });
  }
  return [...byKey.values()]
    .sort(
      (a, b) =>
        Date.parse(b.at) - Date.parse(a.at) ||
        b.key.length - a.key.length ||
        b.key.localeCompare(a.key),
    )
    .slice(0, MAX_NOTICES);
}

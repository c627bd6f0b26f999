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

/** A shard event as the notices need it (ShardEvents' fields). */
export interface NoticeEvent {
  readonly at: string;
  readonly kind: string;
  readonly shard: { readonly id: string; readonly name: string };
  readonly ungovernedCompute?: {
    readonly action: string;
    readonly killedPids: readonly number[];
    readonly message: string;
  } | null;
}

/** Notices kept in the list; the oldest go first. */
export const MAX_NOTICES = 5;

/**
 * The notices to show above the shards: events that are no state change and say something
 * people must read (ungovernedCompute: the compute fence found GPU work outside the compute
 * ledger), newest first, at most MAX_NOTICES.
 */
export function shardNotices(
  events: readonly NoticeEvent[],
): { key: string; shardName: string; at: string; text: string }[] {
  const notices = events.flatMap((event) => {
    const found = event.ungovernedCompute;
    if (event.kind !== 'UNGOVERNED_COMPUTE' || !found) return [];
    const done =
      found.action === 'KILL'
        ? `killed ${found.killedPids.join(', ') || 'nothing'}`
        : found.action === 'STOP'
          ? 'the shard is stopped'
          : 'reported';
    return [
      {
        key: `${event.shard.id}|${event.at}`,
        shardName: event.shard.name,
        at: event.at,
        text: `${found.message}: ${done}`,
      },
    ];
  });
  return notices.reverse().slice(0, MAX_NOTICES);
}

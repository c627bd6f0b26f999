/**
 * Elastic memory as the portal shows it (docs/elastic.md): where a shard's GPU memory is, the
 * move under way, and which of Suspend and Resume apply.
 */
import type { ShardFieldsFragment } from '@gpushards/graphql-client';

type Memory = ShardFieldsFragment['memory'];

/** suspendShard takes a RUNNING shard (any of the team's, elastic or not). */
export function canSuspend(state: string): boolean {
  return state === 'RUNNING';
}

/** resumeShard asks for a SUSPENDED (or still SUSPENDING) shard's memory back. */
export function canResume(state: string): boolean {
  return state === 'SUSPENDED' || state === 'SUSPENDING';
}

/** The move's progress, 0-100, while one is under way and its total is known; else null. */
export function moveProgress(memory: Memory): number | null {
  if (memory.where !== 'MOVING_OUT' && memory.where !== 'MOVING_IN') return null;
  if (memory.moved === null || memory.total === null) return null;
  const total = Number(memory.total.bytes);
  if (!(total > 0)) return null;
  return Math.min(100, Math.round((Number(memory.moved.bytes) / total) * 100));
}

/** A shard as a move's progress concerns it: its state, version and memory. */
interface Moving<M> {
  readonly state: string;
  readonly version: number;
  readonly memory: M;
}

/** Whether the shard's memory is moving (a state whose progress the portal reads by polling). */
export function isMoving(state: string): boolean {
  return state === 'SUSPENDING' || state === 'RESUMING';
}

/**
 * The row with the progress read for it: only for the same version in the same moving state (a
 * newer version, or another state, is newer news than the read, which is then left out).
 */
export function withProgress<M, T extends Moving<M>>(row: T, read: Moving<M> | undefined): T {
  if (read === undefined || !isMoving(row.state)) return row;
  if (read.version !== row.version || read.state !== row.state) return row;
  return { ...row, memory: read.memory };
}

/** One line under the state: where its memory is and why; null while it is on the GPU. */
export function memoryNote(memory: Memory): string | null {
  const cause = memory.suspendCause === null ? '' : ` (${causeLabel(memory.suspendCause)})`;
  const progress =
    memory.moved !== null && memory.total !== null
      ? `, ${memory.moved.human} of ${memory.total.human}`
      : '';
  switch (memory.where) {
    case 'GPU':
      return null;
    case 'MOVING_OUT':
      return `moving to host RAM${progress}${cause}`;
    case 'HOST':
      return `in host RAM${memory.moved === null ? '' : `, ${memory.moved.human}`}${cause}${
        memory.resumeWantedAt === null ? '' : '; resuming when its GPU has room'
      }`;
    case 'MOVING_IN':
      return `moving back to the GPU${progress}`;
    default:
      return memory.where;
  }
}

function causeLabel(cause: string): string {
  switch (cause) {
    case 'suspend-requested':
      return 'suspended by its team';
    case 'idle-suspend':
      return 'idle policy';
    case 'make-room':
      return 'idle, to make room';
    case 'reclaim':
      return 'reclaimed';
    default:
      return cause;
  }
}

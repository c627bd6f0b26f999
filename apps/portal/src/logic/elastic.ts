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

/** One line under the state: where its memory is and why; null while it is on the GPU. */
export function memoryNote(memory: Memory): string | null {
  const cause = memory.suspendCause === null ? '' : ` (${causeLabel(memory.suspendCause)})`;
  switch (memory.where) {
    case 'GPU':
      return null;
    case 'MOVING_OUT':
      return `moving to host RAM${cause}`;
    case 'HOST':
      return `in host RAM${memory.moved === null ? '' : `, ${memory.moved.human}`}${cause}${
        memory.resumeWantedAt === null ? '' : '; resuming when its GPU has room'
      }`;
    case 'MOVING_IN':
      return 'moving back to the GPU';
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

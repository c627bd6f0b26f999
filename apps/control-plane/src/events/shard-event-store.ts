/**
 * The shard_event table: every shard event the control plane publishes (state changes and the
 * notices VIOLATION, UNGOVERNED_COMPUTE, IDLE, IDLE_STOP), so that a client that reloads, or
 * connects after a restart, reads what shardEvents told (shardEventHistory, teamShardEvents).
 *
 * Writers call recordShardEvents in the transaction that commits the change, right before it
 * commits, with the changes they will publish after it (CommitEffects.changes); a rolled-back
 * transaction stores nothing and publishes nothing. Notices that change no row (the fences'
 * findings) are stored by a statement of their own right before they are published.
 */
import type { RawSql } from '../database/index.js';
import type { ShardStateChange } from './shard-event-bus.js';
import { kindOf, noticesOf } from './shard-event-payloads.js';

/**
 * Stores the changes not stored yet, in their order, in one statement, and sets each one's
 * `eventId` (ids increase in that order). Call it inside the committing transaction.
 */
export async function recordShardEvents(
  tx: RawSql,
  changes: readonly ShardStateChange[],
): Promise<void> {
  const unrecorded = changes.filter((change) => change.eventId === undefined);
  if (unrecorded.length === 0) return;
  const rows = unrecorded.map((change) => ({
    at: change.at.toISOString(),
    shardId: change.shard.id,
    teamId: change.shard.teamId,
    kind: kindOf(change),
    previousState: change.previousState,
    state: change.state,
    details: noticesOf(change),
  }));
  const inserted = await tx.$queryRaw<{ id: bigint }[]>`
    INSERT INTO shard_event (at, shard_id, team_id, kind, previous_state, state, details)
    SELECT (e.item->>'at')::timestamptz, (e.item->>'shardId')::uuid, (e.item->>'teamId')::uuid,
           e.item->>'kind', e.item->>'previousState', e.item->>'state', e.item->'details'
      FROM jsonb_array_elements(${JSON.stringify(rows)}::jsonb) WITH ORDINALITY AS e(item, ord)
     ORDER BY e.ord
    RETURNING id`;
  // The sequence hands out ids in the order the rows are inserted (ORDER BY ord): sorted, the
  // ids returned are the changes' in order, whatever order RETURNING lists them in.
  const ids = inserted.map((row) => BigInt(row.id)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  unrecorded.forEach((change, i) => {
    change.eventId = String(ids[i]);
  });
}

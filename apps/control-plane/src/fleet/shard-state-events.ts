import type { ShardStateEvent } from '@gpushards/protocol';
import { nextOnReport } from '@gpushards/limits';
import type { PrismaService, RawSql, ShardState } from '../database/index.js';
import type { Logger } from '../logging/logger.js';
import {
  CommitEffects,
  type ShardLifecycle,
  type ShardMove,
  type TransitionFields,
} from '../shards/shard-lifecycle.js';
import type { ShardRecord } from '../shards/shard-record.js';
import { noteShardEvent } from './fleet-statements.js';

export type StateEventOutcome =
  | { readonly applied: true; readonly state: ShardState }
  | {
      readonly applied: false;
      readonly reason: 'unknown-shard' | 'other-host' | 'stale' | 'not-applicable';
    };

/** One reported event and the host whose agent sent it. */
export interface HostStateEvent {
  readonly hostId: string;
  readonly event: ShardStateEvent;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A batch of state events settles every shard it names in one transaction, however many. */
const STATE_EVENTS_TRANSACTION = { maxWait: 10_000, timeout: 30_000 };

/**
 * Applies agents' shard state events: only events newer (`at`) than the last applied one for
 * the shard, from the shard's own host, that make sense in its state (libs/limits
 * nextOnReport); EXITED, FAILED, STOPPED and VANISHED release the reservation.
 *
 * A batch (the agent link's WriteBatcher gathers the events that arrive while the previous
 * batch is written) is one transaction of a few statements whatever its size: its shards are
 * locked in id order by one statement, each event is decided in arrival order for its shard
 * against the row as the earlier events of the batch left it, and the moves are written
 * together (ShardLifecycle.moveMany); a shard with two moves in one batch (STARTING then
 * RUNNING) has the first written before the second is decided. Before, each event cost its
 * own lock and update: four statements per launched shard.
 */
export class ShardStateEvents {
  constructor(
    private readonly prisma: PrismaService,
    private readonly lifecycle: ShardLifecycle,
    private readonly logger: Logger,
  ) {}

  /**
   * Applies the events in one transaction, each exactly as alone, in arrival order for each
   * shard. If the batch fails (a deadlock with placement, a serialisation failure), its events
   * are applied again one transaction each.
   */
  async apply(events: readonly HostStateEvent[]): Promise<StateEventOutcome[]> {
    const outcomes: (StateEventOutcome | undefined)[] = events.map(({ event }) =>
      UUID.test(event.shardId) ? undefined : { applied: false, reason: 'unknown-shard' },
    );
    const pending = events
      .map((report, index) => ({ ...report, shardId: report.event.shardId.toLowerCase(), index }))
      .filter(({ index }) => outcomes[index] === undefined)
      .sort((a, b) => (a.shardId < b.shardId ? -1 : a.shardId > b.shardId ? 1 : a.index - b.index));
    const applyAll = async (batch: typeof pending): Promise<void> => {
      const effects = new CommitEffects();
      const applied = await this.prisma.direct.transaction(
        (tx) => this.applyInTransaction(tx, batch, effects),
        STATE_EVENTS_TRANSACTION,
      );
      this.lifecycle.afterCommit(effects);
      batch.forEach(({ index }, i) => (outcomes[index] = applied[i]));
    };
    if (pending.length > 1) {
      try {
        await applyAll(pending);
      } catch (error) {
        this.logger.warn(
          { err: error, events: pending.length },
          'a batch of shard state events failed; applying them one at a time',
        );
        for (const one of pending) await applyAll([one]);
      }
    } else if (pending.length === 1) {
      await applyAll(pending);
    }
    return outcomes.map((outcome) => outcome!);
  }

  /** The batch's outcomes in its order; `batch` is sorted by shard id, then arrival. */
  private async applyInTransaction(
    tx: RawSql,
    batch: readonly (HostStateEvent & { readonly shardId: string })[],
    effects: CommitEffects,
  ): Promise<StateEventOutcome[]> {
    const current = await this.lifecycle.lockMany(tx, [
      ...new Set(batch.map((item) => item.shardId)),
    ]);
    /** Moves decided and not yet written, by shard id (one per shard at a time). */
    let moves = new Map<string, ShardMove>();
    const write = async (): Promise<void> => {
      if (moves.size === 0) return;
      const written = [...moves.values()];
      moves = new Map();
      for (const row of await this.lifecycle.moveMany(tx, written, effects)) {
        current.set(row.id, row);
      }
    };
    const outcomes: StateEventOutcome[] = [];
    for (const { hostId, event, shardId } of batch) {
      // The shard's earlier move in this batch is written first: this event is judged
      // against the row as it left it.
      if (moves.has(shardId)) await write();
      const shard = current.get(shardId);
      if (isMoveProgress(shard, hostId, event)) {
        await recordMemoryReport(tx, shard!.id, event);
        await noteShardEvent(tx, shard!.id, new Date(event.at), event.containerId);
        current.set(shardId, { ...shard!, lastEventAt: new Date(event.at) });
        outcomes.push({ applied: true, state: shard!.state });
        continue;
      }
      const decided = decide(shard, hostId, event);
      if (decided.kind === 'outcome') {
        outcomes.push(decided.outcome);
        continue;
      }
      const { at, fields, next, cause } = decided;
      if (next === shard!.state) {
        await noteShardEvent(tx, shard!.id, at, event.containerId);
        current.set(shardId, {
          ...shard!,
          lastEventAt: at,
          containerId: event.containerId ?? shard!.containerId,
        });
        outcomes.push({ applied: true, state: next });
        continue;
      }
      // No event brings a LOST shard back (nextOnReport): its host's return does, with room
      // checked (LostShardReturns), so no move here takes a reservation.
      moves.set(shardId, { shard: shard!, state: next, cause, fields, at });
      await recordMemoryReport(tx, shard!.id, event);
      outcomes.push({ applied: true, state: next });
    }
    await write();
    return outcomes;
  }
}

/**
 * Elastic memory (docs/elastic.md): a SUSPENDING or RESUMING report for a shard in that state
 * carries the move's progress only; it changes no state.
 */
function isMoveProgress(
  shard: ShardRecord | undefined,
  hostId: string,
  event: ShardStateEvent,
): boolean {
  return (
    shard !== undefined &&
    shard.hostId === hostId &&
    (event.state === 'SUSPENDING' || event.state === 'RESUMING') &&
    shard.state === event.state &&
    (shard.lastEventAt === null || new Date(event.at).getTime() > shard.lastEventAt.getTime())
  );
}

/**
 * What a memory report says of the move, kept on the shard for the API (progress, the finished
 * move's bytes and seconds, why it failed). Runs after the move it reports is decided, so a
 * move's start (moveMany resets the progress) never overwrites it: the UPDATE of moveMany comes
 * later in the batch only for a later event of the same shard.
 */
async function recordMemoryReport(tx: RawSql, shardId: string, event: ShardStateEvent) {
  switch (event.state) {
    case 'SUSPENDING':
    case 'RESUMING':
      if (event.progress === undefined) return;
      await tx.$executeRaw`
        UPDATE shard SET memory_moved_bytes = ${event.progress.completedBytes},
                         memory_total_bytes = ${event.progress.totalBytes ?? null}
         WHERE id = ${shardId}::uuid`;
      return;
    case 'SUSPENDED':
    case 'RESUMED':
      if (event.moved === undefined) return;
      await tx.$executeRaw`
        UPDATE shard SET memory_moved_bytes = ${event.moved.bytes},
                         memory_total_bytes = ${event.moved.bytes},
                         memory_move_seconds = ${event.moved.seconds},
                         memory_move_error = NULL
         WHERE id = ${shardId}::uuid`;
      return;
    case 'SUSPEND_FAILED':
    case 'RESUME_FAILED':
      await tx.$executeRaw`
        UPDATE shard SET memory_move_error = ${event.reason ?? 'the agent gave no reason'}
         WHERE id = ${shardId}::uuid`;
      return;
    default:
      return;
  }
}

type Decision =
  | { readonly kind: 'outcome'; readonly outcome: StateEventOutcome }
  | {
      readonly kind: 'move';
      readonly at: Date;
      readonly next: ShardState;
      readonly cause: ShardMove['cause'];
      readonly fields: TransitionFields;
    };

/** What the event does to the shard as it stands (undefined: no such shard). */
function decide(shard: ShardRecord | undefined, hostId: string, event: ShardStateEvent): Decision {
  const at = new Date(event.at);
  if (shard === undefined) return { kind: 'outcome', outcome: refused('unknown-shard') };
  if (shard.hostId !== hostId) return { kind: 'outcome', outcome: refused('other-host') };
  if (shard.lastEventAt !== null && at.getTime() <= shard.lastEventAt.getTime()) {
    return { kind: 'outcome', outcome: refused('stale') };
  }
  const report = nextOnReport(shard.state, event.state);
  if (report === undefined) return { kind: 'outcome', outcome: refused('not-applicable') };
  const fields: TransitionFields = {
    lastEventAt: at,
    ...(event.containerId === undefined ? {} : { containerId: event.containerId }),
    ...(event.exitCode === undefined ? {} : { exitCode: event.exitCode }),
    ...(report.state === 'RUNNING' ? { startedAt: at } : {}),
    ...(event.state === 'FAILED' || event.state === 'VANISHED'
      ? { failureReason: failureReasonOf(event) }
      : {}),
  };
  return { kind: 'move', at, next: report.state, cause: report.cause, fields };
}

function refused(reason: 'unknown-shard' | 'other-host' | 'stale' | 'not-applicable') {
  return { applied: false, reason } as const;
}

function failureReasonOf(event: ShardStateEvent): string {
  if (event.state === 'VANISHED') {
    return event.reason === undefined
      ? 'the container vanished'
      : `the container vanished: ${event.reason}`;
  }
  return event.reason ?? 'the agent reported a failure without a reason';
}

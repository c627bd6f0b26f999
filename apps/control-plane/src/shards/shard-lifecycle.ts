import { Inject, Injectable } from '@nestjs/common';
import {
  assertTransition,
  stoppedStateOf,
  type HostState,
  type TransitionCause,
} from '@gpushards/limits';
import type { Caller } from '../auth/caller.js';
import { canSeeTeam } from '../auth/team-scope.js';
import { Prisma, type RawSql, type ShardState } from '../database/index.js';
import { NotFoundError } from '../errors/domain-errors.js';
import { ShardEventBus, type ShardStateChange } from '../events/shard-event-bus.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { FleetCache, type GpuDelta } from '../placement/fleet-cache.js';
import { QueueSignal } from '../placement/queue-signal.js';
import { InjectShardCommands, type ShardCommands } from './shard-commands.js';
import { SHARD_COLUMNS, type ShardRecord } from './shard-record.js';

/** Fields a state change may set besides the state; absent ones keep their value. */
export interface TransitionFields {
  readonly failureReason?: string;
  readonly exitCode?: number;
  readonly containerId?: string;
  /** Kept if already set (the first start counts). */
  readonly startedAt?: Date;
  /** `at` of the agent event that caused the change. */
  readonly lastEventAt?: Date;
  /** Entering SUSPENDING: why (a suspend cause of libs/limits). */
  readonly suspendCause?: string;
}

/** One locked shard's state change, for ShardLifecycle.moveMany. */
export interface ShardMove {
  readonly shard: ShardRecord;
  readonly state: ShardState;
  readonly cause: TransitionCause;
  readonly fields: TransitionFields;
  /** When it happened, if not at moveMany's `at` (an agent's event carries its own time). */
  readonly at?: Date;
}

/** One command for an agent, sent after commit. */
export type PendingCommand = (commands: ShardCommands) => Promise<void>;

/**
 * What a transaction changed that the world outside the database must learn once it commits:
 * the fleet cache, subscribers, agents. Collected during the transaction, applied by
 * ShardLifecycle.afterCommit (and dropped if the transaction rolls back). Every change in
 * `changes` must have been stored in the transaction (recordShardEvents; moveMany does it).
 */
export class CommitEffects {
  readonly gpuDeltas: GpuDelta[] = [];
  readonly changes: ShardStateChange[] = [];
  readonly hostStates: { hostId: string; state: HostState }[] = [];
  readonly commands: { description: Record<string, unknown>; send: PendingCommand }[] = [];

  command(description: Record<string, unknown>, send: PendingCommand): void {
    this.commands.push({ description, send });
  }
}

/**
 * The shard state machine's writes (the machine itself is libs/limits' lifecycle): state changes
 * with their reservation releases, taking a lost shard's reservation back, and what follows a
 * commit. Callers lock the shard row first (`lock`) and pass their transaction.
 */
@Injectable()
export class ShardLifecycle {
  private readonly logger: Logger;
  private readonly observers: ((change: ShardStateChange) => void)[] = [];

  constructor(
    private readonly cache: FleetCache,
    private readonly events: ShardEventBus,
    private readonly queue: QueueSignal,
    @InjectShardCommands() private readonly commands: ShardCommands,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shards' });
  }

  /**
   * The shard, row-locked until the transaction ends; undefined if it does not exist. The lock
   * is FOR NO KEY UPDATE (what an UPDATE of its non-key columns takes): it serialises state
   * changes but not the rows that merely reference the shard (usage samples, reservations),
   * whose foreign-key checks would otherwise wait on it and deadlock a heartbeat batch against
   * a batch of state events.
   */
  async lock(tx: RawSql, shardId: string): Promise<ShardRecord | undefined> {
    const rows = await tx.$queryRaw<ShardRecord[]>`
      SELECT ${SHARD_COLUMNS} FROM shard WHERE id = ${shardId}::uuid FOR NO KEY UPDATE`;
    return rows[0];
  }

  /**
   * lock for a caller's request: NOT_FOUND (named by `id`, as the caller wrote it) when there is
   * no such shard or it belongs to a team the caller may not see.
   */
  async lockVisible(tx: RawSql, caller: Caller, shardId: string, id: string): Promise<ShardRecord> {
    const shard = await this.lock(tx, shardId);
    if (shard === undefined || !canSeeTeam(caller, shard.teamId)) {
      throw new NotFoundError('shard', id);
    }
    return shard;
  }

  /**
   * lock for many shards in one statement: the rows that exist, by id, locked in id order (the
   * order every batch locks shards in, so two batches cannot wait on each other).
   */
  async lockMany(tx: RawSql, shardIds: readonly string[]): Promise<Map<string, ShardRecord>> {
    if (shardIds.length === 0) return new Map();
    const rows = await tx.$queryRaw<ShardRecord[]>`
      SELECT ${SHARD_COLUMNS} FROM shard WHERE id = ANY(${[...shardIds]}::uuid[])
       ORDER BY id FOR NO KEY UPDATE`;
    return new Map(rows.map((row) => [row.id, row]));
  }

  /**
   * Moves a locked shard to `state` for `cause`, as the lifecycle table allows (throws
   * IllegalTransitionError otherwise): bumps version, sets stoppedAt when the run ends,
   * releases its reservations when the new state does not hold them. A transition that takes
   * a reservation (placement, recovery) must have taken it before. Returns the updated row.
   */
  async moveTo(
    tx: RawSql,
    shard: ShardRecord,
    state: ShardState,
    cause: TransitionCause,
    fields: TransitionFields,
    effects: CommitEffects,
    at: Date = new Date(),
  ): Promise<ShardRecord> {
    const [updated] = await this.moveMany(tx, [{ shard, state, cause, fields }], effects, at);
    return updated!;
  }

  /**
   * moveTo for many locked shards (distinct) in a fixed number of statements whatever their
   * number (one, with the shard events, when no reservation is released and no suspended cap
   * moves): a reconcile after a restart settles up to a thousand shards of a host at once.
   * Every move is checked against the lifecycle table before anything is written; the changes
   * are stored as shard events in the rows' statement (as recordShardEvents stores them, each
   * change's `eventId` set) and published after commit. Returns the updated rows in the order
   * of `moves`.
   */
  async moveMany(
    tx: RawSql,
    moves: readonly ShardMove[],
    effects: CommitEffects,
    at: Date = new Date(),
  ): Promise<ShardRecord[]> {
    if (moves.length === 0) return [];
    const checked = moves.map(({ shard, state, cause, fields, at: movedAt }) => {
      // A reclaimed shard (stop intent requeue or preempt) does not end as STOPPED once stopped.
      if (
        shard.state === 'STOPPING' &&
        state === 'STOPPED' &&
        (shard.stopIntent === 'requeue' || shard.stopIntent === 'preempt')
      ) {
        ({ state, cause } = stoppedStateOf(shard.stopIntent));
      }
      const check = assertTransition(shard.state, state, cause);
      return { shard, state, fields, check, at: movedAt ?? at };
    });
    await this.releaseReservations(
      tx,
      checked.filter((move) => move.check.reservation === 'release').map((move) => move.shard.id),
      effects,
    );
    await this.moveSuspendedCaps(tx, checked, effects);
    const column = <T>(pick: (move: (typeof checked)[number]) => T) => checked.map(pick);
    const iso = (date: Date | undefined | null) => date?.toISOString() ?? null;
    // The rows and their stored shard events (what recordShardEvents writes for a state change
    // with no notice: kind STATE, no details) in one statement; the events are inserted in the
    // order of `moves`, so their ids increase in it.
    const rows = await tx.$queryRaw<
      (ShardRecord & {
        moveOrd: number;
        movePrevious: string;
        moveState: string;
        moveAt: Date;
        eventId: bigint;
      })[]
    >`
      WITH moved AS (
      UPDATE shard SET state = move.m_state::shard_state,
                       version = version + 1,
                       updated_at = now(),
                       failure_reason = coalesce(move.m_failure_reason, failure_reason),
                       exit_code = coalesce(move.m_exit_code, exit_code),
                       container_id = CASE WHEN move.m_state = 'PENDING' THEN NULL
                                           ELSE coalesce(move.m_container_id, container_id) END,
                       -- Back in the queue (a requeued reclaim victim), its run is over: the
                       -- next run's start is its own (the idle policy and the youngest-first
                       -- victim order read it).
                       started_at = CASE WHEN move.m_state = 'PENDING' THEN NULL
                                         ELSE coalesce(started_at, move.m_started_at) END,
                       stopped_at = coalesce(stopped_at, move.m_stopped_at),
                       last_event_at = coalesce(move.m_last_event_at, last_event_at),
                       queued_at = CASE WHEN move.m_state = 'PENDING' THEN move.m_at
                                        ELSE queued_at END,
                       stop_intent = CASE WHEN move.m_state = 'STOPPING' THEN stop_intent END,
                       reclaim_for = CASE WHEN move.m_state IN ('STOPPING', 'PENDING',
                                                                'SUSPENDING')
                                          THEN reclaim_for END,
                       -- Elastic memory (docs/elastic.md): the last suspend's cause (its
                       -- metrics label the resume with it too); a reclaimed shard's resume is
                       -- wanted as soon as it is SUSPENDED (it comes back when room does).
                       suspend_cause = coalesce(move.m_suspend_cause, suspend_cause),
                       -- Kept after the resume (the wake latency is measured from it); a
                       -- new suspend starts without one, a failed resume drops it (the next
                       -- wake asks again rather than the queue retrying at once). A lost
                       -- shard back half moved (LOST -> SUSPENDING) finishes the suspend it
                       -- had begun: a resume wanted before the loss stays wanted.
                       resume_wanted_at = CASE
                         WHEN move.m_state = 'SUSPENDING'
                              AND shard.state::text NOT IN ('SUSPENDING', 'LOST')
                           THEN NULL
                         WHEN move.m_state = 'SUSPENDED' AND shard.state = 'RESUMING' THEN NULL
                         WHEN move.m_state = 'SUSPENDED' AND shard.state = 'SUSPENDING'
                              AND suspend_cause = 'reclaim'
                           THEN coalesce(resume_wanted_at, move.m_at)
                         ELSE resume_wanted_at END,
                       memory_moved_bytes = CASE
                         WHEN move.m_state IN ('SUSPENDING', 'RESUMING')
                              AND shard.state::text <> move.m_state THEN 0
                         ELSE memory_moved_bytes END,
                       memory_total_bytes = CASE
                         WHEN move.m_state IN ('SUSPENDING', 'RESUMING')
                              AND shard.state::text <> move.m_state THEN NULL
                         ELSE memory_total_bytes END
        FROM unnest(${column((m) => m.shard.id)}::uuid[],
                    ${column((m) => m.state)}::text[],
                    ${column((m) => m.fields.failureReason ?? null)}::text[],
                    ${column((m) => m.fields.exitCode ?? null)}::int[],
                    ${column((m) => m.fields.containerId ?? null)}::text[],
                    ${column((m) => iso(m.fields.startedAt))}::timestamptz[],
                    ${column((m) => (m.check.endsRun ? m.at.toISOString() : null))}::timestamptz[],
                    ${column((m) => iso(m.fields.lastEventAt))}::timestamptz[],
                    ${column((m) => m.at.toISOString())}::timestamptz[],
                    ${column((m) => m.fields.suspendCause ?? null)}::text[],
                    ${column((m) => m.shard.state)}::text[],
                    ${checked.map((_, i) => i)}::int[])
             AS move(m_id, m_state, m_failure_reason, m_exit_code, m_container_id, m_started_at,
                     m_stopped_at, m_last_event_at, m_at, m_suspend_cause, m_previous, m_ord)
       WHERE shard.id = move.m_id
      RETURNING ${SHARD_COLUMNS}, move.m_ord AS "moveOrd", move.m_previous AS "movePrevious",
                move.m_state AS "moveState", move.m_at AS "moveAt"
      ), events AS (
        INSERT INTO shard_event (at, shard_id, team_id, kind, previous_state, state, details)
        SELECT moved."moveAt", moved.id::uuid, moved."teamId"::uuid, 'STATE', moved."movePrevious",
               moved."moveState", '{}'::jsonb
          FROM moved ORDER BY moved."moveOrd"
        RETURNING id, shard_id
      )
      SELECT moved.*, events.id AS "eventId"
        FROM moved JOIN events ON events.shard_id = moved.id::uuid`;
    const byId = new Map(
      rows.map(({ moveOrd: _o, movePrevious: _p, moveState: _s, moveAt: _a, eventId, ...row }) => [
        row.id,
        { row: row as ShardRecord, eventId: String(eventId) },
      ]),
    );
    const changes: ShardStateChange[] = checked.map(({ shard, state, at: movedAt }) => {
      const updated = byId.get(shard.id);
      if (updated === undefined) throw new Error(`shard ${shard.id} vanished while locked`);
      return {
        shard: updated.row,
        previousState: shard.state,
        state,
        at: movedAt,
        eventId: updated.eventId,
      };
    });
    effects.changes.push(...changes);
    return changes.map((change) => change.shard);
  }

  /**
   * Releases every live reservation of the shards and lowers their GPUs' reserved bytes and
   * compute shares (an ISOLATED shard's also from the GPU's isolated total: a shard's mode does
   * not change while it holds a reservation, setShardCompute refuses it).
   */
  async releaseReservations(
    tx: RawSql,
    shardIds: readonly string[],
    effects: CommitEffects,
  ): Promise<void> {
    if (shardIds.length === 0) return;
    const released = await tx.$queryRaw<
      { uuid: string; bytes: bigint; permille: number; isolated: number }[]
    >`
      WITH released AS (
        UPDATE shard_gpu SET released_at = now()
         WHERE shard_id = ANY(${[...shardIds]}::uuid[]) AND released_at IS NULL
        RETURNING shard_id, gpu_uuid, reserved_bytes, compute_share_permille
      )
      SELECT released.gpu_uuid AS uuid, sum(released.reserved_bytes)::bigint AS bytes,
             sum(released.compute_share_permille)::int AS permille,
             coalesce(sum(released.compute_share_permille)
                        FILTER (WHERE shard.compute_mode = 'ISOLATED'), 0)::int AS isolated
        FROM released JOIN shard ON shard.id = released.shard_id
       GROUP BY released.gpu_uuid ORDER BY released.gpu_uuid`;
    if (released.length === 0) return;
    await tx.$executeRaw`
      UPDATE gpu SET reserved_bytes = gpu.reserved_bytes - freed.bytes,
                     guaranteed_compute_permille = gpu.guaranteed_compute_permille - freed.permille,
                     isolated_compute_permille = gpu.isolated_compute_permille - freed.isolated
        FROM unnest(${released.map((r) => r.uuid)}::text[], ${released.map((r) => r.bytes)}::bigint[],
                    ${released.map((r) => r.permille)}::int[], ${released.map((r) => r.isolated)}::int[])
             AS freed(uuid, bytes, permille, isolated)
       WHERE gpu.uuid = freed.uuid`;
    for (const gpu of released)
      effects.gpuDeltas.push({
        uuid: gpu.uuid,
        bytes: -Number(gpu.bytes),
        permille: -gpu.permille,
        isolatedPermille: -gpu.isolated,
      });
  }

  /**
   * Elastic memory (docs/elastic.md): a shard entering SUSPENDED adds its cap to the suspended
   * bytes of the GPUs it last held and opens its stay in host RAM (shard_suspension, for usage);
   * one leaving SUSPENDED takes them away and closes the stay. Its GPUs are those of its latest
   * reservation rows (a suspended shard comes back only there).
   */
  private async moveSuspendedCaps(
    tx: RawSql,
    moves: readonly { shard: ShardRecord; state: ShardState; at: Date }[],
    effects: CommitEffects,
  ): Promise<void> {
    const changes = moves.flatMap(({ shard, state, at }) => {
      const was = shard.state === 'SUSPENDED';
      const is = state === 'SUSPENDED';
      return was === is ? [] : [{ id: shard.id, sign: is ? 1 : -1, at: at.toISOString() }];
    });
    if (changes.length === 0) return;
    const ids = changes.map((c) => c.id);
    const signs = changes.map((c) => c.sign);
    const ats = changes.map((c) => c.at);
    const moved = await tx.$queryRaw<{ uuid: string; bytes: bigint }[]>`
      WITH change AS (
        SELECT * FROM unnest(${ids}::uuid[], ${signs}::int[]) AS change(shard_id, sign)
      ), caps AS (
        SELECT row.gpu_uuid AS uuid, sum(change.sign * shard.limit_bytes_per_gpu)::bigint AS bytes
          FROM change
          JOIN shard ON shard.id = change.shard_id
          JOIN shard_gpu row ON row.shard_id = change.shard_id
                            AND row.reserved_at = (SELECT max(reserved_at) FROM shard_gpu
                                                    WHERE shard_id = change.shard_id)
         GROUP BY row.gpu_uuid
      )
      UPDATE gpu SET suspended_bytes = greatest(gpu.suspended_bytes + caps.bytes, 0)
        FROM caps WHERE gpu.uuid = caps.uuid AND caps.bytes <> 0
      RETURNING gpu.uuid, caps.bytes`;
    for (const gpu of moved) {
      effects.gpuDeltas.push({ uuid: gpu.uuid, bytes: 0, suspendedBytes: Number(gpu.bytes) });
    }
    await tx.$executeRaw`
      UPDATE shard_suspension SET resumed_at = greatest(change.at, suspended_at)
        FROM unnest(${ids}::uuid[], ${signs}::int[], ${ats}::timestamptz[])
             AS change(shard_id, sign, at)
       WHERE shard_suspension.shard_id = change.shard_id AND change.sign < 0
         AND shard_suspension.resumed_at IS NULL`;
    await tx.$executeRaw`
      INSERT INTO shard_suspension (shard_id, team_id, bytes, suspended_at)
      SELECT shard.id, shard.team_id, shard.limit_bytes_per_gpu * shard.gpu_count, change.at
        FROM unnest(${ids}::uuid[], ${signs}::int[], ${ats}::timestamptz[])
             AS change(shard_id, sign, at)
        JOIN shard ON shard.id = change.shard_id
       WHERE change.sign > 0
      ON CONFLICT DO NOTHING`;
  }

  /**
   * A SUSPENDED shard's cap taken back on the GPUs it last held, for its resume (libs/limits
   * canResume: only the room on each GPU as it is; its cap already counts among the suspended
   * bytes, which moveTo RESUMING lowers). All or nothing; false when a GPU lacks the room.
   */
  async takeResume(tx: RawSql, shard: ShardRecord, effects: CommitEffects): Promise<boolean> {
    return this.retake(tx, shard, effects, 'resume');
  }

  /**
   * Takes a released shard's reservation again on the GPUs it last held (a LOST shard whose
   * host came back still running it). All or nothing; false when a GPU no longer has room.
   */
  async reacquire(tx: RawSql, shard: ShardRecord, effects: CommitEffects): Promise<boolean> {
    return this.retake(tx, shard, effects, 'place');
  }

  private async retake(
    tx: RawSql,
    shard: ShardRecord,
    effects: CommitEffects,
    rule: 'place' | 'resume',
  ): Promise<boolean> {
    const size = shard.limitBytesPerGpu;
    const fits =
      rule === 'resume'
        ? Prisma.sql`gpu_resume_fits(total_bytes, reserved_bytes, unattributed_bytes, ${size})`
        : Prisma.sql`gpu_memory_fits(total_bytes, reserved_bytes, suspended_bytes,
                                     unattributed_bytes, overcommit_ratio, ${size})`;
    const permille = shard.computeSharePermille;
    const isolated = shard.computeMode === 'ISOLATED' ? permille : 0;
    const taken = await tx.$queryRaw<{ uuid: string }[]>`
      UPDATE gpu SET reserved_bytes = reserved_bytes + ${size},
                     guaranteed_compute_permille = guaranteed_compute_permille + ${permille}::int,
                     isolated_compute_permille = isolated_compute_permille + ${isolated}::int
       WHERE uuid IN (SELECT gpu_uuid FROM shard_gpu
                       WHERE shard_id = ${shard.id}::uuid
                         AND released_at = (SELECT max(released_at) FROM shard_gpu
                                             WHERE shard_id = ${shard.id}::uuid))
         AND missing_since IS NULL
         AND ${fits}
         AND gpu_compute_fits(guaranteed_compute_permille, isolated_compute_permille,
                              isolated_pool_permille, ${permille}::int, ${isolated}::int)
      RETURNING uuid`;
    if (taken.length !== shard.gpuCount) {
      if (taken.length > 0) {
        await tx.$executeRaw`
          UPDATE gpu SET reserved_bytes = reserved_bytes - ${size},
                         guaranteed_compute_permille = guaranteed_compute_permille - ${permille}::int,
                         isolated_compute_permille = isolated_compute_permille - ${isolated}::int
           WHERE uuid = ANY(${taken.map((gpu) => gpu.uuid)}::text[])`;
      }
      return false;
    }
    await this.openReservations(
      tx,
      shard.id,
      taken.map((gpu) => gpu.uuid),
      size,
    );
    for (const gpu of taken) {
      effects.gpuDeltas.push({
        uuid: gpu.uuid,
        bytes: Number(size),
        permille,
        isolatedPermille: isolated,
      });
    }
    return true;
  }

  /**
   * New live reservation rows, starting after every earlier row of the shard (the key holds
   * the start, at millisecond precision), each guaranteeing the shard's compute share as its
   * row holds it now (the caller raised the GPUs' guaranteed_compute_permille for it).
   */
  async openReservations(
    tx: RawSql,
    shardId: string,
    gpuUuids: readonly string[],
    size: bigint,
    usedBytes: readonly bigint[] = [],
  ): Promise<void> {
    const used = gpuUuids.map((_, i) => usedBytes[i] ?? 0n);
    await tx.$executeRaw`
      INSERT INTO shard_gpu (shard_id, gpu_uuid, reserved_bytes, used_bytes,
                             compute_share_permille, reserved_at)
      SELECT ${shardId}::uuid, opened.uuid, ${size}, opened.used,
             (SELECT compute_share_permille FROM shard WHERE id = ${shardId}::uuid),
             greatest(now(), (SELECT max(reserved_at) + interval '1 millisecond'
                                FROM shard_gpu WHERE shard_id = ${shardId}::uuid))
        FROM unnest(${[...gpuUuids]}::text[], ${used}::bigint[]) AS opened(uuid, used)`;
  }

  /** Hears every committed state change of this process (metrics); must not throw. */
  observe(observer: (change: ShardStateChange) => void): void {
    this.observers.push(observer);
  }

  /** Tells the cache, subscribers and agents what the committed transaction did. */
  afterCommit(effects: CommitEffects): void {
    this.cache.applyCommitted(effects.gpuDeltas);
    const entered: string[] = [];
    const left: string[] = [];
    for (const change of effects.changes) {
      if (change.state === 'PENDING') entered.push(change.shard.id);
      else if (change.previousState === 'PENDING') left.push(change.shard.id);
    }
    const freed =
      effects.gpuDeltas.some((delta) => delta.bytes < 0 || (delta.permille ?? 0) < 0) ||
      effects.hostStates.some((host) => host.state === 'ONLINE');
    if (freed || entered.length > 0 || left.length > 0) {
      this.queue.committed({ entered, left, freed });
    }
    for (const { hostId, state } of effects.hostStates) this.cache.setHostState(hostId, state);
    for (const change of effects.changes) {
      if (change.eventId === undefined) {
        this.logger.error(
          { shardId: change.shard.id, state: change.state },
          'a shard event published without being stored: its transaction did not call recordShardEvents',
        );
      }
      this.events.publish(change);
      for (const observer of this.observers) observer(change);
    }
    for (const { description, send } of effects.commands) {
      send(this.commands).catch((error: unknown) =>
        this.logger.warn(
          { err: error, ...description },
          'shard command not delivered; the agent will reconcile',
        ),
      );
    }
  }
}

/** A shard's new live reservations: its GPUs, at `size` bytes each. */
export interface OpenedReservations {
  readonly shardId: string;
  readonly gpuUuids: readonly string[];
  readonly size: bigint;
}

/**
 * openReservations for many shards (distinct), as a part of a statement that writes more in
 * the same round trip (a CTE of the queue's placements' statement, applyPlacements);
 * undefined when there is nothing to insert. Each row starts after every earlier row of its
 * shard and guarantees the shard's compute share as its row holds it. `among`: a subquery of
 * shard ids (uuid) in the same statement; the other shards' rows are left out.
 */
export function reservationsInsert(
  opened: readonly OpenedReservations[],
  among?: Prisma.Sql,
): Prisma.Sql | undefined {
  const rows = opened.flatMap(({ shardId, gpuUuids, size }) =>
    gpuUuids.map((uuid) => ({ shardId, uuid, size })),
  );
  if (rows.length === 0) return undefined;
  return Prisma.sql`
    INSERT INTO shard_gpu (shard_id, gpu_uuid, reserved_bytes, used_bytes,
                           compute_share_permille, reserved_at)
    SELECT opened.shard_id, opened.uuid, opened.size, 0, shard.compute_share_permille,
           greatest(now(), (SELECT max(reserved_at) + interval '1 millisecond'
                              FROM shard_gpu WHERE shard_id = opened.shard_id))
      FROM unnest(${rows.map((r) => r.shardId)}::uuid[], ${rows.map((r) => r.uuid)}::text[],
                  ${rows.map((r) => r.size)}::bigint[]) AS opened(shard_id, uuid, size)
      JOIN shard ON shard.id = opened.shard_id
    ${among === undefined ? Prisma.empty : Prisma.sql`WHERE opened.shard_id IN (${among})`}`;
}

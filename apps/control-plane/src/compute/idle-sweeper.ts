import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import { decideIdle, type IdleAction, type IdleShard } from '@gpushards/limits';
import { Counter, Registry } from 'prom-client';
import { AuditService } from '../audit/audit.service.js';
import { PrismaService, type Prisma } from '../database/index.js';
import type { ShardStateChange } from '../events/shard-event-bus.js';
import { recordShardEvents } from '../events/shard-event-store.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import { DEFAULT_STOP_GRACE_SECONDS } from '../shards/shard-mutations.service.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';
import { ElasticMoves } from '../elastic/elastic-moves.js';
import { SUSPEND_RETRY_SECONDS } from '../elastic/suspend-retry.js';
import { IdleActionKind } from './idle.model.js';

/** How often the idle policies are applied (a policy's shortest time is 60 s). */
export const IDLE_SWEEP_INTERVAL_MS = 15_000;

interface Row {
  shardId: string;
  teamId: string;
  teamName: string;
  hostId: string | null;
  idleAfterSeconds: number;
  stopAfterSeconds: number | null;
  suspendAfterSeconds: number | null;
  elastic: boolean;
  startedAt: Date | null;
  updatedAt: Date;
  lastKernelAt: Date | null;
  observed: boolean;
  idleSince: Date | null;
}

/**
 * Applies each team's idle policy (libs/limits decideIdle) to its RUNNING shards: loads them
 * with their last kernel per the agents' compute ledgers, decides, and applies each action
 * with a conditional write (a shard that launched a kernel or changed state since it was read
 * is left alone; replicas sweeping at once act once):
 * - report: Shard.idleSince set, an IDLE shard event, a `shard.idle` audit event and a warning;
 * - stop: only for a shard already reported for this idle spell: an IDLE_STOP event, a
 *   `shard.idle-stop` audit event, RUNNING → STOPPING and the stop sent to its agent;
 * - clear: a kernel ran again; idleSince cleared.
 * Counted in gpushards_idle_actions_total{action,team}. Tests call `sweep(now)`.
 */
@Injectable()
export class IdleSweeper implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger: Logger;
  private readonly actions: Counter<'action' | 'team'>;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly lifecycle: ShardLifecycle,
    private readonly moves: ElasticMoves,
    registry: Registry,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'compute' });
    this.actions = new Counter({
      name: 'gpushards_idle_actions_total',
      help: "Idle-policy actions on shards: report (found idle), stop (stopped by its team's policy), suspend (its memory to host RAM by its team's policy).",
      labelNames: ['action', 'team'],
      registers: [registry],
    });
  }

  onApplicationBootstrap(): void {
    this.timer = setInterval(() => {
      if (this.running !== undefined) return;
      this.running = this.sweep()
        .catch((error: unknown) => this.logger.error({ err: error }, 'idle sweep failed'))
        .finally(() => {
          this.running = undefined;
        });
    }, IDLE_SWEEP_INTERVAL_MS);
    this.timer.unref();
  }

  async onModuleDestroy(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }

  /** One pass over every team with an idle policy; returns the actions applied. */
  async sweep(now: number = Date.now()): Promise<IdleAction[]> {
    // The watched teams first, then their running shards by the (team_id, state) index: joined
    // the other way round the planner read every running shard's GPUs of the fleet (55-92 ms
    // at 1,000 hosts, every 15 s on each replica) to keep those of a few teams, or of none.
    const rows = await this.prisma.$queryRaw<Row[]>`
      WITH watched AS MATERIALIZED (
        SELECT id, name, idle_after_seconds, idle_stop_after_seconds,
               idle_suspend_after_seconds FROM team
         WHERE idle_after_seconds IS NOT NULL
      )
      SELECT shard.id::text AS "shardId", team.id::text AS "teamId", team.name AS "teamName",
             shard.host_id AS "hostId", team.idle_after_seconds AS "idleAfterSeconds",
             team.idle_stop_after_seconds AS "stopAfterSeconds",
             team.idle_suspend_after_seconds AS "suspendAfterSeconds",
             shard.elastic AND coalesce((SELECT allow_elastic FROM quota_policy
                                          WHERE team_id = team.id), false)
               -- Not elastic for SUSPEND_RETRY_SECONDS after a suspend that failed.
               AND NOT (shard.memory_move_error IS NOT NULL
                        AND shard.last_event_at > now() - make_interval(secs => ${SUSPEND_RETRY_SECONDS}))
               AS elastic,
             shard.started_at AS "startedAt", shard.updated_at AS "updatedAt",
             activity.last_kernel AS "lastKernelAt", activity.observed,
             shard.idle_since AS "idleSince"
        FROM watched team JOIN shard ON shard.team_id = team.id AND shard.state = 'RUNNING'
        CROSS JOIN LATERAL (
          SELECT max(held.last_kernel_at) AS last_kernel,
                 coalesce(bool_or(held.busy_ratio IS NOT NULL OR held.last_kernel_at IS NOT NULL),
                          false) AS observed
            FROM shard_gpu held
           WHERE held.shard_id = shard.id AND held.released_at IS NULL) activity`;
    const byTeam = new Map<string, Row[]>();
    for (const row of rows) {
      const list = byTeam.get(row.teamId) ?? [];
      list.push(row);
      byTeam.set(row.teamId, list);
    }
    const applied: IdleAction[] = [];
    for (const team of byTeam.values()) {
      const first = team[0]!;
      const shards: IdleShard[] = team.map((row) => ({
        shardId: row.shardId,
        startedAt: (row.startedAt ?? row.updatedAt).getTime(),
        lastKernelAt: row.lastKernelAt?.getTime() ?? null,
        observed: row.observed,
        idleSince: row.idleSince?.getTime() ?? null,
        elastic: row.elastic,
      }));
      const policy = {
        idleAfterSeconds: first.idleAfterSeconds,
        ...(first.stopAfterSeconds === null ? {} : { stopAfterSeconds: first.stopAfterSeconds }),
        ...(first.suspendAfterSeconds === null
          ? {}
          : { suspendAfterSeconds: first.suspendAfterSeconds }),
      };
      for (const action of decideIdle(shards, policy, now)) {
        const row = team.find((r) => r.shardId === action.shardId)!;
        try {
          if (await this.apply(action, row)) applied.push(action);
        } catch (error) {
          this.logger.error({ err: error, shardId: action.shardId }, 'idle action failed');
        }
      }
    }
    return applied;
  }

  /** Applies one action if the shard is still as it was read; whether it was. */
  private async apply(action: IdleAction, row: Row): Promise<boolean> {
    const effects = new CommitEffects();
    const done = await this.prisma.$transaction(async (tx) => {
      if (action.kind === 'clear') {
        const n = await tx.$executeRaw`
          UPDATE shard SET idle_since = NULL WHERE id = ${action.shardId}::uuid AND idle_since IS NOT NULL`;
        return n > 0;
      }
      const since = new Date(action.idleSince);
      const shard = await this.lockStillIdle(tx, action.shardId, since);
      if (shard === undefined) return false;
      const idle = { idleSince: since, idleSeconds: Math.floor(action.idleSeconds) };
      const log = {
        shardId: shard.id,
        teamId: shard.teamId,
        hostId: shard.hostId,
        idleSince: since.toISOString(),
        idleSeconds: idle.idleSeconds,
      };
      if (action.kind === 'report') {
        if (shard.idleSince?.getTime() === action.idleSince) return false;
        const [updated] = await tx.$queryRaw<ShardRecord[]>`
          UPDATE shard SET idle_since = ${since} WHERE id = ${shard.id}::uuid
          RETURNING ${SHARD_COLUMNS}`;
        await this.audit.record(tx, null, {
          action: 'shard.idle',
          targetType: 'Shard',
          targetId: shard.id,
          teamId: shard.teamId,
          details: { idleSince: since.toISOString(), idleSeconds: idle.idleSeconds },
        });
        const report: ShardStateChange = {
          shard: updated!,
          previousState: shard.state,
          state: shard.state,
          at: new Date(),
          idle: { ...idle, action: IdleActionKind.REPORT },
        };
        await recordShardEvents(tx, [report]);
        effects.changes.push(report);
        this.logger.warn(log, 'shard idle: no kernel on any of its GPUs');
        return true;
      }
      if (shard.idleSince?.getTime() !== action.idleSince) return false;
      if (action.kind === 'suspend') return this.suspend(tx, shard, idle, effects, log);
      const seconds = idle.idleSeconds;
      // Stored before the state change's event (moveTo stores it): what is done, then that it was.
      const idleStop: ShardStateChange = {
        shard,
        previousState: shard.state,
        state: 'STOPPING',
        at: new Date(),
        idle: { ...idle, action: IdleActionKind.STOP },
      };
      await recordShardEvents(tx, [idleStop]);
      const stopped = await this.lifecycle.moveTo(
        tx,
        shard,
        'STOPPING',
        'stop-requested',
        {
          failureReason: `stopped by its team's idle policy: no kernel on any of its GPUs for ${seconds} s`,
        },
        effects,
      );
      // Before the state change in the events: what is done, then that it was.
      effects.changes.unshift({ ...idleStop, shard: stopped, state: stopped.state });
      await this.audit.record(tx, null, {
        action: 'shard.idle-stop',
        targetType: 'Shard',
        targetId: shard.id,
        teamId: shard.teamId,
        details: { idleSince: since.toISOString(), idleSeconds: seconds },
      });
      if (shard.hostId !== null) {
        const hostId = shard.hostId;
        effects.command({ shardId: shard.id, hostId, command: 'stop', reason: 'idle' }, (c) =>
          c.stop(hostId, shard.id, DEFAULT_STOP_GRACE_SECONDS),
        );
      }
      this.logger.warn(log, "shard stopped by its team's idle policy");
      return true;
    });
    if (done) {
      this.lifecycle.afterCommit(effects);
      if (action.kind !== 'clear') this.actions.inc({ action: action.kind, team: row.teamName });
    }
    return done;
  }

  /**
   * The policy's `suspend` (docs/elastic.md): an IDLE_SUSPEND event, a `shard.idle-suspend`
   * audit event, RUNNING → SUSPENDING and the suspend sent to its agent. A host that cannot
   * take it leaves the shard running (logged; the next sweep tries again).
   */
  private async suspend(
    tx: Prisma.TransactionClient,
    shard: ShardRecord,
    idle: { idleSince: Date; idleSeconds: number },
    effects: CommitEffects,
    log: Record<string, unknown>,
  ): Promise<boolean> {
    const notice: ShardStateChange = {
      shard,
      previousState: shard.state,
      state: 'SUSPENDING',
      at: new Date(),
      idle: { ...idle, action: IdleActionKind.SUSPEND },
    };
    // Checked before anything is written: the notice is stored before the state change's
    // event (what is done, then that it was), and a suspend its host cannot take writes none.
    const problem = await this.moves.suspendProblem(tx, shard);
    if (problem !== undefined) {
      this.logger.warn({ ...log, reason: problem }, 'idle shard not suspended');
      return false;
    }
    await recordShardEvents(tx, [notice]);
    const suspended = await this.moves.suspendChecked(tx, shard, 'idle-suspend', effects);
    effects.changes.unshift({ ...notice, shard: suspended });
    await this.audit.record(tx, null, {
      action: 'shard.idle-suspend',
      targetType: 'Shard',
      targetId: shard.id,
      teamId: shard.teamId,
      details: { idleSince: idle.idleSince.toISOString(), idleSeconds: idle.idleSeconds },
    });
    this.logger.warn(log, "shard suspended by its team's idle policy");
    return true;
  }

  /**
   * The shard, row-locked, if it is still RUNNING and has launched no kernel since `since`
   * (the idle start the decision was made on); undefined otherwise.
   */
  private async lockStillIdle(
    tx: Prisma.TransactionClient,
    shardId: string,
    since: Date,
  ): Promise<ShardRecord | undefined> {
    const rows = await tx.$queryRaw<ShardRecord[]>`
      SELECT ${SHARD_COLUMNS} FROM shard
       WHERE id = ${shardId}::uuid AND state = 'RUNNING'
         AND coalesce((SELECT max(last_kernel_at) FROM shard_gpu
                        WHERE shard_id = shard.id AND released_at IS NULL),
                      shard.started_at, shard.updated_at) = ${since}
       FOR NO KEY UPDATE`;
    return rows[0];
  }
}

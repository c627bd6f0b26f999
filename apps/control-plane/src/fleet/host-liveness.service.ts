import { Inject, Injectable } from '@nestjs/common';
import { converge } from '@gpushards/limits';
import { AuditService } from '../audit/audit.service.js';
import { PrismaService, type Prisma } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { CommitEffects, ShardLifecycle, type TransitionFields } from '../shards/shard-lifecycle.js';
import { InjectClock, type Clock } from './clock.js';
import { lockHostShards, markHostOffline, reviveHost, silentHostIds } from './fleet-statements.js';

/**
 * Hosts that stop and start speaking: a silent host goes OFFLINE and its shards are LOST
 * (STOPPING ones STOPPED), reservations released; a host that speaks again comes back and its
 * lost shards are settled by the convergence table (libs/limits): running ones take their
 * reservation again, the others end.
 */
@Injectable()
export class HostLivenessService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly lifecycle: ShardLifecycle,
    @InjectClock() private readonly clock: Clock,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fleet' });
  }

  /**
   * Hosts whose last heartbeat is older than `deadline` become OFFLINE: their PLACED, STARTING
   * and RUNNING shards LOST, STOPPING ones STOPPED, reservations released. Nothing is
   * rescheduled elsewhere. Returns the hosts it marked.
   */
  async markSilentHostsOffline(deadline: Date): Promise<string[]> {
    const marked: string[] = [];
    for (const id of await silentHostIds(this.prisma, deadline)) {
      // One host that cannot be marked (its transaction timed out on a busy database) must not
      // leave every host after it for the next sweep: with 200 of 10,000 hosts lost at once,
      // each such failure held back the rest by a sweep period (bench/README.md, fleet-sim).
      try {
        if (await this.markOffline(id, deadline)) marked.push(id);
      } catch (error) {
        this.logger.error(
          { err: error, hostId: id },
          'could not mark a silent host OFFLINE; the next sweep tries again',
        );
      }
    }
    return marked;
  }

  private async markOffline(hostId: string, deadline: Date): Promise<boolean> {
    const now = this.clock.now();
    const effects = new CommitEffects();
    const marked = await this.prisma.$transaction(async (tx) => {
      const row = await markHostOffline(tx, hostId, deadline);
      if (row === undefined) return false;
      const shards = await lockHostShards(tx, hostId, [
        'PLACED',
        'STARTING',
        'RUNNING',
        'STOPPING',
      ]);
      for (const shard of shards) {
        const next = shard.state === 'STOPPING' ? 'STOPPED' : 'LOST';
        await this.lifecycle.moveTo(tx, shard, next, 'host-offline', {}, effects, now);
        await this.audit.record(tx, null, {
          action: next === 'LOST' ? 'shard.lost' : 'shard.stop',
          targetType: 'Shard',
          targetId: shard.id,
          teamId: shard.teamId,
          details: { from: shard.state, to: next, hostId, reason: 'host offline' },
        });
      }
      await this.audit.record(tx, null, {
        action: 'host.offline',
        targetType: 'Host',
        targetId: hostId,
        teamId: null,
        details: {
          previousState: row.previous,
          lastHeartbeatAt: row.lastHeartbeatAt?.toISOString() ?? null,
          shards: shards.map((shard) => shard.id),
        },
      });
      effects.hostStates.push({ hostId, state: 'OFFLINE' });
      return true;
    });
    if (!marked) return false;
    this.lifecycle.afterCommit(effects);
    this.logger.warn(
      { hostId, lostShards: effects.changes.length },
      'host missed its heartbeats: OFFLINE, its shards lost and released',
    );
    return true;
  }

  /** An OFFLINE host that speaks again: back to ONLINE (or CORDONED), lost shards settled. */
  async revive(hostId: string, running: ReadonlySet<string>, now: Date): Promise<boolean> {
    const effects = new CommitEffects();
    const revived = await this.prisma.$transaction(async (tx) => {
      const state = await reviveHost(tx, hostId, now);
      if (state === undefined) return false;
      await this.recoverLostShards(tx, hostId, running, effects, now);
      await this.audit.record(tx, null, {
        action: 'host.online',
        targetType: 'Host',
        targetId: hostId,
        teamId: null,
        details: { state },
      });
      effects.hostStates.push({ hostId, state });
      return true;
    });
    this.lifecycle.afterCommit(effects);
    if (revived) this.logger.info({ hostId }, 'host is back');
    return revived;
  }

  /**
   * The host's LOST shards: those its agent still runs take their reservation again and are
   * RUNNING (FAILED if their GPUs no longer have room); the others FAILED.
   */
  async recoverLostShards(
    tx: Prisma.TransactionClient,
    hostId: string,
    running: ReadonlySet<string>,
    effects: CommitEffects,
    now: Date,
  ): Promise<void> {
    for (const shard of await lockHostShards(tx, hostId, ['LOST'])) {
      const decision = converge(
        shard.state,
        running.has(shard.id) ? { kind: 'running' } : { kind: 'absent' },
      );
      let next = decision.next ?? {
        state: 'FAILED' as const,
        cause: 'host-back-without-it' as const,
      };
      let fields: TransitionFields =
        decision.reason === undefined ? {} : { failureReason: decision.reason };
      if (next.cause === 'recovered' && !(await this.lifecycle.reacquire(tx, shard, effects))) {
        next = { state: 'FAILED', cause: 'host-back-without-it' };
        fields = {
          failureReason: 'its GPUs were given to other shards while its host was offline',
        };
      }
      await this.lifecycle.moveTo(tx, shard, next.state, next.cause, fields, effects, now);
      await this.audit.record(tx, null, {
        action: next.state === 'RUNNING' ? 'shard.recover' : 'shard.fail',
        targetType: 'Shard',
        targetId: shard.id,
        teamId: shard.teamId,
        details: { from: 'LOST', to: next.state, hostId, ...fields },
      });
    }
  }
}

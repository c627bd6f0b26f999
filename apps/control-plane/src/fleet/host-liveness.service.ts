import { Inject, Injectable } from '@nestjs/common';
import {
  converge,
  nextOnHostLoss,
  type ObservedMemory,
  type StopIntent,
  type TransitionCause,
} from '@gpushards/limits';
import { AuditService, type AuditEntry } from '../audit/audit.service.js';
import { PrismaService, type RawSql, type ShardState } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import {
  CommitEffects,
  ShardLifecycle,
  type ShardMove,
  type TransitionFields,
} from '../shards/shard-lifecycle.js';
import { InjectClock, type Clock } from './clock.js';
import { lockHostShards, reviveHost } from './fleet-statements.js';
import { lockShardsOfLostHosts, markHostsOffline, silentHostIds } from './host-loss-statements.js';
import { LostShardReturns } from './lost-shard-returns.js';

/**
 * How many silent hosts one transaction of the offline sweep marks: each host's row and its
 * shards' stay locked until the commit, and a failed transaction is retried host by host.
 */
export const HOSTS_PER_OFFLINE_TRANSACTION = 100;
/** A marking transaction on a saturated database may take longer than the usual 5 s. */
const OFFLINE_TRANSACTION_TIMEOUT_MS = 30_000;

/**
 * The shard containers an agent reports running, by shard id, with where each one's GPU memory
 * is (docs/elastic.md; undefined: not said, so resident).
 */
export type RunningContainers = ReadonlyMap<string, ObservedMemory | undefined>;

/**
 * Hosts that stop and start speaking: a silent host goes OFFLINE and every shard holding
 * something there is LOST (STOPPING ones end as their stop intent says), reservations and
 * suspended caps released; a host that speaks again comes back and its lost shards are settled
 * by the convergence table (libs/limits): running ones take their reservation again (or come
 * back SUSPENDED when their memory is in host RAM), the others end.
 */
@Injectable()
export class HostLivenessService {
  private readonly logger: Logger;
  private readonly returns: LostShardReturns;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly lifecycle: ShardLifecycle,
    @InjectClock() private readonly clock: Clock,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fleet' });
    this.returns = new LostShardReturns(lifecycle);
  }

  /**
   * Hosts whose last heartbeat is older than `deadline` become OFFLINE: their shards as
   * libs/limits nextOnHostLoss says (placed, starting, running and elastic ones LOST, STOPPING
   * ones STOPPED, or PENDING or PREEMPTED by their stop intent), reservations and suspended
   * caps released. Nothing is rescheduled elsewhere. Returns the hosts it marked.
   *
   * Up to HOSTS_PER_OFFLINE_TRANSACTION hosts per transaction, each a fixed handful of
   * statements whatever the number of hosts: one host per transaction took 227 s to mark 200
   * lost hosts of 10,000 on a busy database (bench/README.md, fleet-sim). A transaction that
   * fails is retried host by host, so that one host that cannot be marked does not hold back
   * the others; such a host is logged and left for the next sweep.
   */
  async markSilentHostsOffline(deadline: Date): Promise<string[]> {
    const silent = await silentHostIds(this.prisma.direct, deadline);
    const marked: string[] = [];
    for (let i = 0; i < silent.length; i += HOSTS_PER_OFFLINE_TRANSACTION) {
      const chunk = silent.slice(i, i + HOSTS_PER_OFFLINE_TRANSACTION);
      try {
        marked.push(...(await this.markOffline(chunk, deadline)));
        continue;
      } catch (error) {
        if (chunk.length === 1) {
          this.couldNotMark(chunk[0]!, error);
          continue;
        }
      }
      for (const hostId of chunk) {
        try {
          marked.push(...(await this.markOffline([hostId], deadline)));
        } catch (error) {
          this.couldNotMark(hostId, error);
        }
      }
    }
    return marked;
  }

  private couldNotMark(hostId: string, error: unknown): void {
    this.logger.error(
      { err: error, hostId },
      'could not mark a silent host OFFLINE; the next sweep tries again',
    );
  }

  /** The hosts still silent past `deadline` OFFLINE, in one transaction; returns them. */
  private async markOffline(hostIds: readonly string[], deadline: Date): Promise<string[]> {
    const now = this.clock.now();
    const effects = new CommitEffects();
    const lost = await this.prisma.direct.transaction(
      async (tx) => {
        const hosts = await markHostsOffline(tx, hostIds, deadline);
        if (hosts.length === 0) return [];
        const shards = await lockShardsOfLostHosts(
          tx,
          hosts.map((host) => host.id),
        );
        const moves = shards.map((shard): ShardMove => {
          const next = nextOnHostLoss(shard.state, stopIntentOf(shard.stopIntent))!;
          return { shard, state: next.state, cause: next.cause, fields: {} };
        });
        // The audit says what each shard became as written.
        const moved = await this.lifecycle.moveMany(tx, moves, effects, now);
        const byHost = new Map<string, string[]>(hosts.map((host) => [host.id, []]));
        for (const { shard } of moves) byHost.get(shard.hostId!)!.push(shard.id);
        await this.audit.recordOwn(tx, [
          ...moves.map(({ shard }, i) => ({
            action: moved[i]!.state === 'LOST' ? 'shard.lost' : 'shard.stop',
            targetType: 'Shard',
            targetId: shard.id,
            teamId: shard.teamId,
            details: {
              from: shard.state,
              to: moved[i]!.state,
              hostId: shard.hostId,
              reason: 'host offline',
            },
          })),
          ...hosts.map((host) => ({
            action: 'host.offline',
            targetType: 'Host',
            targetId: host.id,
            teamId: null,
            details: {
              previousState: host.previous,
              lastHeartbeatAt: host.lastHeartbeatAt?.toISOString() ?? null,
              shards: byHost.get(host.id)!,
            },
          })),
        ]);
        for (const host of hosts) effects.hostStates.push({ hostId: host.id, state: 'OFFLINE' });
        return hosts.map((host) => ({
          hostId: host.id,
          lostShards: byHost.get(host.id)!.length,
        }));
      },
      { timeout: OFFLINE_TRANSACTION_TIMEOUT_MS },
    );
    this.lifecycle.afterCommit(effects);
    for (const { hostId, lostShards } of lost) {
      this.logger.warn(
        { hostId, lostShards },
        'host missed its heartbeats: OFFLINE, its shards lost and released',
      );
    }
    return lost.map((host) => host.hostId);
  }

  /** An OFFLINE host that speaks again: back to ONLINE (or CORDONED), lost shards settled. */
  async revive(hostId: string, running: RunningContainers, now: Date): Promise<boolean> {
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
   * The host's LOST shards, by the convergence table: those its agent no longer runs end
   * (FAILED, or EXITED); those it still runs come back by where it finds their memory, with
   * what they take again checked against their GPUs and the host's budget as they are now
   * (LostShardReturns, libs/limits lostShardReturn): RUNNING with their reservation taken
   * again, SUSPENDED with their cap suspended again (and the resume they were owed), RESUMING
   * when only their GPUs have room for memory in host RAM, or FAILED when nothing has. Their audit rows are written together, in one statement.
   */
  async recoverLostShards(
    tx: RawSql,
    hostId: string,
    running: RunningContainers,
    effects: CommitEffects,
    now: Date,
  ): Promise<void> {
    const audit: AuditEntry[] = [];
    for (const shard of await lockHostShards(tx, hostId, ['LOST'])) {
      const memory = running.has(shard.id) ? (running.get(shard.id) ?? 'resident') : undefined;
      const decision = converge(
        shard.state,
        memory === undefined ? { kind: 'absent' } : { kind: 'running', memory },
      );
      let next: { state: ShardState; cause: TransitionCause; fields: TransitionFields };
      if (decision.next?.cause === 'recovered' && memory !== undefined) {
        next = await this.returns.settle(tx, shard, memory, effects, now);
      } else {
        next = {
          ...(decision.next ?? { state: 'FAILED', cause: 'host-back-without-it' }),
          fields: decision.reason === undefined ? {} : { failureReason: decision.reason },
        };
        await this.lifecycle.moveTo(tx, shard, next.state, next.cause, next.fields, effects, now);
      }
      audit.push({
        action: next.cause === 'recovered' ? 'shard.recover' : 'shard.fail',
        targetType: 'Shard',
        targetId: shard.id,
        teamId: shard.teamId,
        details: { from: 'LOST', to: next.state, hostId, ...next.fields },
      });
    }
    await this.audit.recordOwn(tx, audit);
  }
}

/** A STOPPING shard's stop intent as stored (NULL: a plain stop). */
function stopIntentOf(stored: string | null): StopIntent {
  return stored === 'requeue' || stored === 'preempt' ? stored : 'stop';
}

import { Inject, Injectable } from '@nestjs/common';
import { AuditService } from '../audit/audit.service.js';
import type { Caller } from '../auth/caller.js';
import { PrismaService, type HostState, type Prisma } from '../database/index.js';
import { ConflictError, NotFoundError } from '../errors/domain-errors.js';
import { LifecycleMetrics } from '../metrics/lifecycle-metrics.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import { DEFAULT_STOP_GRACE_SECONDS } from '../shards/shard-mutations.service.js';
import { InjectClock, type Clock } from './clock.js';
import type { Host } from './fleet.model.js';
import { checkHostId, FleetReadsService } from './fleet-reads.service.js';
import { lockHost, lockHostShards, setHostState, type LockedHost } from './fleet-statements.js';
import { RemovedHosts } from './removed-hosts.js';
import { HostCredentialRevoker } from './host-credentials.js';

/** Shards that keep a host from being removed: any not stopped (PENDING ones wait elsewhere). */
const LIVE_ON_HOST = [
  'PLACED',
  'STARTING',
  'RUNNING',
  'SUSPENDING',
  'SUSPENDED',
  'RESUMING',
  'STOPPING',
  'LOST',
] as const;

async function isRemoved(tx: Prisma.TransactionClient, hostId: string): Promise<boolean> {
  const host = await tx.host.findUnique({ where: { id: hostId }, select: { removedAt: true } });
  return host?.removedAt !== null && host?.removedAt !== undefined;
}

/** What operators do to hosts: cordon, uncordon, drain, remove; each with its audit event. */
@Injectable()
export class HostOperationsService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly lifecycle: ShardLifecycle,
    private readonly reads: FleetReadsService,
    private readonly removedHosts: RemovedHosts,
    private readonly revoker: HostCredentialRevoker,
    private readonly metrics: LifecycleMetrics,
    @InjectClock() private readonly clock: Clock,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fleet' });
  }

  /** No new shards on the host; its shards stay. Kept while the host is OFFLINE. */
  async cordon(caller: Caller, id: string): Promise<Host> {
    return this.changeHost(caller, id, 'host.cordon', async (tx, host) => {
      if (host.cordoned) return undefined;
      return { cordoned: true, state: host.state === 'ONLINE' ? 'CORDONED' : host.state };
    });
  }

  /** Takes new shards again (CORDONED or DRAINING → ONLINE; an OFFLINE host comes back ONLINE). */
  async uncordon(caller: Caller, id: string): Promise<Host> {
    return this.changeHost(caller, id, 'host.uncordon', async (tx, host) => {
      if (!host.cordoned && host.state !== 'CORDONED' && host.state !== 'DRAINING')
        return undefined;
      return { cordoned: false, state: host.state === 'OFFLINE' ? 'OFFLINE' : 'ONLINE' };
    });
  }

  /**
   * Cordon, and stop every shard on the host through the agent (STOPPING; STOPPED at once on
   * an OFFLINE host or for LOST shards). Stopped shards are not placed elsewhere: their teams
   * create new ones. The host stays DRAINING until uncordoned.
   */
  async drain(caller: Caller, id: string): Promise<Host> {
    return this.changeHost(caller, id, 'host.drain', async (tx, host, effects) => {
      const offline = host.state === 'OFFLINE';
      const shards = await lockHostShards(tx, host.id, ['PLACED', 'STARTING', 'RUNNING', 'LOST']);
      const state: HostState = offline ? 'OFFLINE' : 'DRAINING';
      if (shards.length === 0 && host.cordoned && host.state === state) return undefined;
      for (const shard of shards) {
        const next = offline || shard.state === 'LOST' ? 'STOPPED' : 'STOPPING';
        const cause = next === 'STOPPING' ? 'stop-requested' : 'stopped';
        await this.lifecycle.moveTo(tx, shard, next, cause, {}, effects, this.clock.now());
        await this.audit.record(tx, caller, {
          action: 'shard.stop',
          targetType: 'Shard',
          targetId: shard.id,
          teamId: shard.teamId,
          details: { from: shard.state, to: next, reason: 'host drain', hostId: host.id },
        });
        if (next === 'STOPPING') {
          const shardId = shard.id;
          effects.command({ shardId, hostId: host.id, command: 'stop' }, (commands) =>
            commands.stop(host.id, shardId, DEFAULT_STOP_GRACE_SECONDS),
          );
        }
      }
      return { cordoned: true, state, details: { stoppedShards: shards.map((s) => s.id) } };
    });
  }

  /**
   * Retires a drained host for good: it must be cordoned (drained) or OFFLINE with no live
   * shard left on it (CONFLICT otherwise, saying what is left). It leaves the fleet (hosts,
   * placement: OFFLINE, cordoned, its GPUs missing) and its agent is refused from then on
   * (RemovedHosts); its row stays for the history of its shards and reservations. After the
   * commit its NATS user is revoked where the deployment allows it (HostCredentialRevoker).
   */
  async remove(caller: Caller, id: string): Promise<Host> {
    const hostId = checkHostId('id', id);
    const effects = new CommitEffects();
    await this.prisma.$transaction(async (tx) => {
      const host = await lockHost(tx, hostId);
      if (host === undefined || (await isRemoved(tx, hostId))) throw new NotFoundError('host', id);
      if (!host.cordoned && host.state !== 'OFFLINE') {
        throw new ConflictError(
          `host ${id} is ${host.state}: drain it first (drainHost), then remove it once its shards stopped`,
        );
      }
      const live = await tx.$queryRaw<{ state: string; count: number }[]>`
        SELECT state::text AS state, count(*)::int AS count FROM shard
         WHERE host_id = ${hostId} AND state::text = ANY(${[...LIVE_ON_HOST]})
         GROUP BY state ORDER BY state`;
      if (live.length > 0) {
        throw new ConflictError(
          `host ${id} still has shards that are not stopped (${live.map((l) => `${l.count} ${l.state}`).join(', ')}): wait for the drain, or stop or delete them`,
        );
      }
      await tx.$executeRaw`
        UPDATE host SET removed_at = now(), state = 'OFFLINE', cordoned = true, updated_at = now()
         WHERE id = ${hostId}`;
      await tx.$executeRaw`
        UPDATE gpu SET missing_since = coalesce(missing_since, now()) WHERE host_id = ${hostId}`;
      await this.audit.record(tx, caller, {
        action: 'host.remove',
        targetType: 'Host',
        targetId: hostId,
        teamId: null,
        details: { from: host.state },
      });
      effects.hostStates.push({ hostId, state: 'OFFLINE' });
    });
    this.lifecycle.afterCommit(effects);
    this.removedHosts.removed(hostId);
    // Its agent's NATS user too, where the deployment lets the control plane revoke it.
    await this.revoker.revokeRemoved();
    this.metrics.committed('host.remove');
    this.logger.info({ hostId, actorTokenId: caller.tokenId }, 'host removed');
    return this.reads.getIncludingRemoved(hostId);
  }

  /**
   * Runs an operator's change of one host in a transaction with its audit event. `decide`
   * returns the new cordon flag and state, or undefined when nothing changes (no event).
   */
  private async changeHost(
    caller: Caller,
    id: string,
    action: string,
    decide: (
      tx: Prisma.TransactionClient,
      host: LockedHost,
      effects: CommitEffects,
    ) => Promise<
      { cordoned: boolean; state: HostState; details?: Prisma.InputJsonObject } | undefined
    >,
  ): Promise<Host> {
    const hostId = checkHostId('id', id);
    const effects = new CommitEffects();
    await this.prisma.$transaction(async (tx) => {
      const host = await lockHost(tx, hostId);
      if (host === undefined || (await isRemoved(tx, hostId))) throw new NotFoundError('host', id);
      const change = await decide(tx, host, effects);
      if (change === undefined) return;
      await setHostState(tx, hostId, change.cordoned, change.state);
      await this.audit.record(tx, caller, {
        action,
        targetType: 'Host',
        targetId: hostId,
        teamId: null,
        details: { from: host.state, to: change.state, ...change.details },
      });
      effects.hostStates.push({ hostId, state: change.state });
    });
    this.lifecycle.afterCommit(effects);
    this.logger.info({ hostId, action, actorTokenId: caller.tokenId }, 'host changed');
    return this.reads.get(hostId);
  }
}

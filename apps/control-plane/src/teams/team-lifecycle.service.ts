import { Inject, Injectable } from '@nestjs/common';
import { isFinal, type TransitionCause } from '@gpushards/limits';
import { AuditService } from '../audit/audit.service.js';
import { AuthService } from '../auth/auth.service.js';
import type { Caller } from '../auth/caller.js';
import { TOKEN_REVOKED_CHANNEL } from '../auth/token-revocation-listener.js';
import {
  lockTeamForUpdate,
  PrismaService,
  type Prisma,
  type ShardState,
} from '../database/index.js';
import { ConflictError, NotFoundError } from '../errors/domain-errors.js';
import { isUniqueViolation } from '../errors/prisma-errors.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { LifecycleMetrics, type LifecycleAction } from '../metrics/lifecycle-metrics.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';
import { checkId, InputCheck, TEAM_NAME } from '../validation/input.js';
import type { Team, TeamDeletion } from './team.model.js';

type Tx = Prisma.TransactionClient;

/** Seconds between SIGTERM and SIGKILL for the shards a team drain stops (as a host drain). */
const DRAIN_GRACE_SECONDS = 30;

/** How a team drain ends one live shard, and whether its host must be told to stop it. */
function drainMove(
  state: ShardState,
  hostOffline: boolean,
): { state: ShardState; cause: TransitionCause; stop: boolean } | undefined {
  switch (state) {
    case 'PENDING':
      return { state: 'DELETED', cause: 'deleted', stop: false };
    case 'PLACED':
    case 'STARTING':
    case 'RUNNING':
      return hostOffline
        ? { state: 'STOPPED', cause: 'stopped', stop: false }
        : { state: 'STOPPING', cause: 'stop-requested', stop: true };
    case 'SUSPENDING':
    case 'RESUMING':
      return { state: 'STOPPING', cause: 'stop-requested', stop: !hostOffline };
    case 'SUSPENDED':
      return { state: 'STOPPED', cause: 'stop-requested', stop: false };
    case 'LOST':
      return { state: 'STOPPED', cause: 'stopped', stop: false };
    default:
      // STOPPING already stops; final states have nothing to stop.
      return undefined;
  }
}

/**
 * A team's life after creation: rename, archive (no new shards, its tokens refused, everything
 * kept) and unarchive, delete (only without live shards, or draining them first; the row and
 * its history stay for accounting). Each change takes the team's lock (as createShard does),
 * writes its audit event in the same transaction, and tells other control planes what they
 * must drop (token revocations by NOTIFY, shard changes by the event relay).
 */
@Injectable()
export class TeamLifecycleService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly auth: AuthService,
    private readonly lifecycle: ShardLifecycle,
    private readonly metrics: LifecycleMetrics,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'teams' });
  }

  async rename(caller: Caller, id: string, name: string): Promise<Team> {
    const teamId = checkId('id', id);
    const check = new InputCheck();
    check.name('name', name, TEAM_NAME);
    check.done();
    try {
      return await this.change(caller, teamId, id, 'team.rename', async (tx, team) => {
        if (team.name === name) return undefined;
        const renamed = await tx.team.update({ where: { id: teamId }, data: { name } });
        return { team: renamed, details: { from: team.name, to: name } };
      });
    } catch (error) {
      if (isUniqueViolation(error))
        throw new ConflictError(`a team named "${name}" already exists`);
      throw error;
    }
  }

  /** No new shards and its tokens refused, until unarchived; shards that run keep running. */
  async archive(caller: Caller, id: string): Promise<Team> {
    const teamId = checkId('id', id);
    let tokens: string[] = [];
    const team = await this.change(caller, teamId, id, 'team.archive', async (tx, team) => {
      if (team.archivedAt !== null) return undefined;
      const archived = await tx.team.update({
        where: { id: teamId },
        data: { archivedAt: new Date() },
      });
      tokens = await this.announceTokens(tx, teamId);
      return { team: archived, details: { name: team.name, tokens: tokens.length } };
    });
    for (const tokenId of tokens) this.auth.forgetToken(tokenId);
    return team;
  }

  async unarchive(caller: Caller, id: string): Promise<Team> {
    const teamId = checkId('id', id);
    return this.change(caller, teamId, id, 'team.unarchive', async (tx, team) => {
      if (team.archivedAt === null) return undefined;
      const active = await tx.team.update({ where: { id: teamId }, data: { archivedAt: null } });
      return { team: active, details: { name: team.name } };
    });
  }

  /**
   * Deletes the team: refused (CONFLICT) while it has live shards, unless `drainFirst`: then the
   * team is archived and every live shard stopped (a waiting one deleted), and the team is
   * deleted by the first call that finds none live (`deleted` false until then: call again).
   * A deleted team's finished shards become DELETED (their containers removed), its tokens are
   * revoked, its quota policy dropped and its name freed; its row, shards, reservations, usage
   * rollups, audit and shard events stay for accounting.
   */
  async delete(caller: Caller, id: string, drainFirst: boolean): Promise<TeamDeletion> {
    const teamId = checkId('id', id);
    const effects = new CommitEffects();
    /** Tokens to drop from this process's cache once committed (revoked, or of a team archived). */
    let revoked: string[] = [];
    let action: LifecycleAction | undefined;
    const result = await this.prisma.$transaction(async (tx): Promise<TeamDeletion> => {
      await lockTeamForUpdate(tx, teamId);
      const team = await tx.team.findUnique({ where: { id: teamId } });
      if (team === null || team.deletedAt !== null) throw new NotFoundError('team', id);
      const shards = await tx.$queryRaw<(ShardRecord & { hostOffline: boolean })[]>`
        SELECT ${SHARD_COLUMNS}, coalesce(host.state = 'OFFLINE', true) AS "hostOffline"
          FROM shard LEFT JOIN host ON host.id = shard.host_id
         WHERE shard.team_id = ${teamId}::uuid AND shard.state <> 'DELETED'
         ORDER BY shard.id FOR NO KEY UPDATE OF shard`;
      const live = shards.filter((shard) => !isFinal(shard.state));
      if (live.length > 0) {
        if (!drainFirst) {
          throw new ConflictError(
            `team "${team.name}" has ${live.length} live shard(s) (${summary(live)}): stop them, or delete it with drainFirst to stop them first`,
            { liveShards: live.length },
          );
        }
        const stopping = await this.drain(tx, caller, team, live, effects);
        if (team.archivedAt === null) revoked = await this.announceTokens(tx, teamId);
        action = 'team.drain';
        return { id: teamId, name: team.name, deleted: false, stoppingShards: stopping };
      }
      const finished = shards.filter((shard) => shard.state !== 'DELETED');
      for (const shard of finished) {
        await this.lifecycle.moveTo(tx, shard, 'DELETED', 'deleted', {}, effects);
        const hostId = shard.hostId;
        if (hostId !== null) {
          effects.command({ shardId: shard.id, hostId, command: 'delete' }, (commands) =>
            commands.delete(hostId, shard.id),
          );
        }
      }
      revoked = await this.announceTokens(tx, teamId, { revoke: true });
      await tx.quotaPolicy.deleteMany({ where: { teamId } });
      // Sign-in gives no one this team any more; open sessions acting as it end with its archive.
      await tx.groupMapping.deleteMany({ where: { teamId } });
      const now = new Date();
      await tx.team.update({
        where: { id: teamId },
        data: { name: `deleted-${teamId}`, deletedAt: now, archivedAt: team.archivedAt ?? now },
      });
      await this.audit.record(tx, caller, {
        action: 'team.delete',
        targetType: 'Team',
        targetId: teamId,
        teamId,
        details: {
          name: team.name,
          shardsDeleted: finished.length,
          credentialsEnded: revoked.length,
        },
      });
      action = 'team.delete';
      return { id: teamId, name: team.name, deleted: true, stoppingShards: 0 };
    });
    this.lifecycle.afterCommit(effects);
    for (const tokenId of revoked) this.auth.forgetToken(tokenId);
    if (action !== undefined) this.metrics.committed(action);
    this.logger.info({ teamId, ...result, actorTokenId: caller.tokenId }, 'team deletion');
    return result;
  }

  /** Archives the team and stops its live shards; returns how many are still stopping. */
  private async drain(
    tx: Tx,
    caller: Caller,
    team: { id: string; name: string; archivedAt: Date | null },
    live: readonly (ShardRecord & { hostOffline: boolean })[],
    effects: CommitEffects,
  ): Promise<number> {
    if (team.archivedAt === null) {
      await tx.team.update({ where: { id: team.id }, data: { archivedAt: new Date() } });
    }
    let stopping = 0;
    for (const shard of live) {
      const move = drainMove(shard.state, shard.hostOffline);
      if (move === undefined) {
        if (shard.state === 'STOPPING') stopping++;
        continue;
      }
      await this.lifecycle.moveTo(tx, shard, move.state, move.cause, {}, effects);
      if (move.state === 'STOPPING') stopping++;
      const hostId = shard.hostId;
      if (move.stop && hostId !== null) {
        effects.command({ shardId: shard.id, hostId, command: 'stop' }, (commands) =>
          commands.stop(hostId, shard.id, DRAIN_GRACE_SECONDS),
        );
      }
    }
    await this.audit.record(tx, caller, {
      action: 'team.drain',
      targetType: 'Team',
      targetId: team.id,
      teamId: team.id,
      details: { name: team.name, shards: live.map((s) => ({ id: s.id, from: s.state })) },
    });
    return stopping;
  }

  /**
   * Tells every control plane to drop the team's unrevoked tokens and open sessions from its
   * cache (the token revocation NOTIFY, delivered at commit); `revoke` also revokes the tokens.
   * Returns their ids, to forget here once committed.
   */
  private async announceTokens(
    tx: Tx,
    teamId: string,
    { revoke = false }: { revoke?: boolean } = {},
  ): Promise<string[]> {
    const tokens = await tx.apiToken.findMany({
      where: { teamId, revokedAt: null },
      select: { id: true },
    });
    const ids = tokens.map((token) => token.id);
    if (revoke && ids.length > 0) {
      await tx.apiToken.updateMany({ where: { id: { in: ids } }, data: { revokedAt: new Date() } });
    }
    // People signed in as the team (their sessions are refused while it is archived).
    const sessions = await tx.webSession.findMany({
      where: { teamId, endedAt: null },
      select: { id: true },
    });
    ids.push(...sessions.map((session) => session.id));
    for (const tokenId of ids) {
      await tx.$executeRaw`SELECT pg_notify(${TOKEN_REVOKED_CHANNEL}, ${tokenId})`;
    }
    return ids;
  }

  /** One change of a team under its lock, with its audit event; undefined from `decide`: none. */
  private async change(
    caller: Caller,
    teamId: string,
    id: string,
    action: LifecycleAction,
    decide: (
      tx: Tx,
      team: Team & { archivedAt: Date | null },
    ) => Promise<{ team: Team; details: Prisma.InputJsonObject } | undefined>,
  ): Promise<Team> {
    let changed = false;
    const team = await this.prisma.$transaction(async (tx) => {
      await lockTeamForUpdate(tx, teamId);
      const team = await tx.team.findUnique({ where: { id: teamId } });
      if (team === null || team.deletedAt !== null) throw new NotFoundError('team', id);
      const change = await decide(tx, team);
      if (change === undefined) return team;
      await this.audit.record(tx, caller, {
        action,
        targetType: 'Team',
        targetId: teamId,
        teamId,
        details: change.details,
      });
      changed = true;
      return change.team;
    });
    if (changed) {
      this.metrics.committed(action);
      this.logger.info({ teamId, action, actorTokenId: caller.tokenId }, 'team changed');
    }
    return team;
  }
}

function summary(shards: readonly ShardRecord[]): string {
  const counts = new Map<string, number>();
  for (const shard of shards) counts.set(shard.state, (counts.get(shard.state) ?? 0) + 1);
  return [...counts].map(([state, n]) => `${n} ${state}`).join(', ');
}

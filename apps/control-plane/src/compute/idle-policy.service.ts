import { Inject, Injectable } from '@nestjs/common';
import { idlePolicyProblem } from '@gpushards/limits';
import { AuditService } from '../audit/audit.service.js';
import type { Caller } from '../auth/caller.js';
import { PrismaService } from '../database/index.js';
import { BadUserInputError, NotFoundError } from '../errors/domain-errors.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import type { Team } from '../teams/team.model.js';
import { checkId } from '../validation/input.js';
import type { IdlePolicy } from './idle.model.js';

/** A team's idle policy: read (Team.idlePolicy) and set by admins (setTeamIdlePolicy). */
@Injectable()
export class IdlePolicyService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'compute' });
  }

  async get(teamId: string): Promise<IdlePolicy | null> {
    const team = await this.prisma.team.findUnique({
      where: { id: teamId },
      select: { idleAfterSeconds: true, idleStopAfterSeconds: true, idleSuspendAfterSeconds: true },
    });
    if (team === null || team.idleAfterSeconds === null) return null;
    return {
      idleAfterSeconds: team.idleAfterSeconds,
      stopAfterSeconds: team.idleStopAfterSeconds,
      suspendAfterSeconds: team.idleSuspendAfterSeconds,
    };
  }

  /** null idleAfterSeconds: no idle policy (stopAfterSeconds must then be left out too). */
  async set(
    caller: Caller,
    teamId: string,
    idleAfterSeconds: number | null,
    stopAfterSeconds: number | null,
    suspendAfterSeconds: number | null = null,
  ): Promise<Team> {
    const id = checkId('teamId', teamId);
    if (idleAfterSeconds === null) {
      if (stopAfterSeconds !== null || suspendAfterSeconds !== null) {
        throw BadUserInputError.of(
          stopAfterSeconds !== null ? 'stopAfterSeconds' : 'suspendAfterSeconds',
          'needs idleAfterSeconds: a shard is reported idle before anything is done to it',
        );
      }
    } else {
      const problem = idlePolicyProblem({
        idleAfterSeconds,
        ...(stopAfterSeconds === null ? {} : { stopAfterSeconds }),
        ...(suspendAfterSeconds === null ? {} : { suspendAfterSeconds }),
      });
      if (problem !== undefined) throw BadUserInputError.of(problem.field, problem.message);
    }
    const team = await this.prisma.$transaction(async (tx) => {
      const rows = await tx.$queryRaw<Team[]>`
        UPDATE team SET idle_after_seconds = ${idleAfterSeconds}::int,
                        idle_stop_after_seconds = ${stopAfterSeconds}::int,
                        idle_suspend_after_seconds = ${suspendAfterSeconds}::int
         WHERE id = ${id}::uuid
        RETURNING id::text AS id, name, created_at AS "createdAt"`;
      const updated = rows[0];
      if (updated === undefined) throw new NotFoundError('team', teamId);
      if (idleAfterSeconds === null) {
        // No policy: nothing is reported idle any more.
        await tx.$executeRaw`
          UPDATE shard SET idle_since = NULL WHERE team_id = ${id}::uuid AND idle_since IS NOT NULL`;
      }
      await this.audit.record(tx, caller, {
        action: 'team.idle-policy',
        targetType: 'Team',
        targetId: id,
        teamId: id,
        details: { idleAfterSeconds, stopAfterSeconds, suspendAfterSeconds },
      });
      return updated;
    });
    this.logger.info(
      {
        teamId: id,
        idleAfterSeconds,
        stopAfterSeconds,
        suspendAfterSeconds,
        actorTokenId: caller.tokenId,
      },
      'idle policy set',
    );
    return team;
  }
}

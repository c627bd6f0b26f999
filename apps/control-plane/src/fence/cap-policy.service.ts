import { Inject, Injectable } from '@nestjs/common';
import { AuditService } from '../audit/audit.service.js';
import type { Caller } from '../auth/caller.js';
import { CapPolicy, PrismaService } from '../database/index.js';
import { BadUserInputError } from '../errors/domain-errors.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { InjectShardCommands, type ShardCommands } from '../shards/shard-commands.js';
import type { Team } from '../teams/team.model.js';
import { TeamsService } from '../teams/teams.service.js';
import { checkId } from '../validation/input.js';
import { CapPolicies } from './cap-policies.js';

/**
 * Reading and setting a team's cap policy (admins set; every member may read). A change reaches
 * the team's running shards at once: each host running one is told to reconcile after commit,
 * and the reconcile reply carries the policy as the database has it (CapPolicies
 * .withCurrentPolicies), whichever replica answers.
 */
@Injectable()
export class CapPolicyService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly teams: TeamsService,
    private readonly policies: CapPolicies,
    private readonly audit: AuditService,
    @InjectShardCommands() private readonly commands: ShardCommands,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fence' });
  }

  override(teamId: string): CapPolicy | null {
    return this.policies.override(teamId);
  }

  effective(teamId: string): CapPolicy {
    return this.policies.effective(teamId);
  }

  async set(caller: Caller, teamId: string, policy: CapPolicy | null): Promise<Team> {
    const id = checkId('teamId', teamId);
    if (policy !== null && !Object.values(CapPolicy).includes(policy)) {
      throw BadUserInputError.of('policy', `must be one of ${Object.values(CapPolicy).join(', ')}`);
    }
    const team = await this.teams.get(caller, id, 'teamId');
    const hostIds = await this.prisma.$transaction(async (tx) => {
      await tx.team.update({ where: { id }, data: { capPolicy: policy } });
      await this.audit.record(tx, caller, {
        action: 'team.capPolicy.set',
        targetType: 'Team',
        targetId: id,
        teamId: id,
        details: { capPolicy: policy },
      });
      const shards = await tx.shard.findMany({
        where: { teamId: id, state: 'RUNNING', hostId: { not: null } },
        select: { hostId: true },
      });
      return [...new Set(shards.map((shard) => shard.hostId!))].sort();
    });
    this.policies.noteOverride(id, policy);
    this.logger.info(
      { teamId: id, capPolicy: policy, actorTokenId: caller.tokenId, hosts: hostIds.length },
      'cap policy set',
    );
    for (const hostId of hostIds) {
      this.commands
        .reconcile(hostId)
        .catch((error: unknown) =>
          this.logger.warn(
            { err: error, hostId, teamId: id },
            "reconcile not delivered: the host's next periodic reconcile applies the cap policy",
          ),
        );
    }
    return team;
  }
}

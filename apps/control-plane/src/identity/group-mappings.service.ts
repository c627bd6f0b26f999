import { Injectable } from '@nestjs/common';
import { AuditService } from '../audit/audit.service.js';
import { Role, type Caller } from '../auth/caller.js';
import { PrismaService } from '../database/index.js';
import { NotFoundError } from '../errors/domain-errors.js';
import { checkId, InputCheck } from '../validation/input.js';

/** A group as providers name them: 1 to 256 printable characters, no leading or trailing space. */
const GROUP = /^[\x21-\x7e](?:[\x20-\x7e]{0,254}[\x21-\x7e])?$/;

export interface GroupMappingRow {
  readonly id: string;
  readonly group: string;
  readonly teamId: string | null;
  readonly role: Role;
  readonly createdAt: Date;
}

/**
 * The admins' group mapping: provider group → (team, role), or → fleet ADMIN. A person's
 * memberships are decided from it at each sign-in (SessionsService); a change counts at the
 * next sign-in of the people it concerns. Each change is audited.
 */
@Injectable()
export class GroupMappingsService {
  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
  ) {}

  list(): Promise<GroupMappingRow[]> {
    return this.prisma.groupMapping.findMany({ orderBy: [{ group: 'asc' }, { createdAt: 'asc' }] });
  }

  /** Sets what `group` gives in `teamId` (null with ADMIN: the fleet); one rule per pair. */
  async set(
    caller: Caller,
    group: string,
    teamId: string | null,
    role: Role,
  ): Promise<GroupMappingRow> {
    const check = new InputCheck();
    if (!GROUP.test(group)) {
      check.problem(
        'group',
        'must be 1 to 256 printable characters, without leading or trailing spaces',
      );
    }
    const team = teamId === null ? null : checkId('teamId', teamId);
    if (role === Role.ADMIN && team !== null) {
      check.problem('teamId', 'ADMIN is fleet-wide: leave teamId out');
    }
    if (role !== Role.ADMIN && team === null) {
      check.problem('teamId', `${role} is a role in a team: give its teamId`);
    }
    check.done();
    return this.prisma.$transaction(async (tx) => {
      if (team !== null) {
        const found = await tx.team.findUnique({
          where: { id: team },
          select: { deletedAt: true },
        });
        if (found === null || found.deletedAt !== null) throw new NotFoundError('team', team);
      }
      const existing = await tx.groupMapping.findFirst({ where: { group, teamId: team } });
      const row =
        existing === null
          ? await tx.groupMapping.create({ data: { group, teamId: team, role } })
          : await tx.groupMapping.update({ where: { id: existing.id }, data: { role } });
      await this.audit.record(tx, caller, {
        action: 'group-mapping.set',
        targetType: 'GroupMapping',
        targetId: row.id,
        teamId: team,
        details: { group, role, ...(existing === null ? {} : { previousRole: existing.role }) },
      });
      return row;
    });
  }

  /** Removes the rule of `group` in `teamId` (null: its ADMIN rule); NOT_FOUND if none. */
  async remove(caller: Caller, group: string, teamId: string | null): Promise<GroupMappingRow> {
    const team = teamId === null ? null : checkId('teamId', teamId);
    return this.prisma.$transaction(async (tx) => {
      const existing = await tx.groupMapping.findFirst({ where: { group, teamId: team } });
      if (existing === null) throw new NotFoundError('group mapping', group);
      await tx.groupMapping.delete({ where: { id: existing.id } });
      await this.audit.record(tx, caller, {
        action: 'group-mapping.remove',
        targetType: 'GroupMapping',
        targetId: existing.id,
        teamId: team,
        details: { group, role: existing.role },
      });
      return existing;
    });
  }
}

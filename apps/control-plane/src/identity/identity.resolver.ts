import { Args, ID, Mutation, Parent, Query, ResolveField, Resolver } from '@nestjs/graphql';
import { Role, type Caller } from '../auth/caller.js';
import { CurrentCaller, MinRole } from '../auth/decorators.js';
import { PrismaService } from '../database/index.js';
import { Loaders, type RequestLoaders } from '../graphql/request-loaders.js';
import { Team } from '../teams/team.model.js';
import { TeamsService } from '../teams/teams.service.js';
import { ApiToken } from '../tokens/api-token.model.js';
import { GroupMappingsService } from './group-mappings.service.js';
import { GroupMapping, Membership, Person, Session } from './identity.model.js';
import { SessionsService } from './sessions.service.js';

/** The signed-in person's session and teams, and the admins' group mapping. */
@Resolver(() => Session)
export class IdentityResolver {
  constructor(
    private readonly prisma: PrismaService,
    private readonly sessions: SessionsService,
    private readonly mappings: GroupMappingsService,
  ) {}

  @Query(() => Session, {
    nullable: true,
    description: 'The session of a person signed in through OpenID Connect; null for an API token.',
  })
  async session(@CurrentCaller() caller: Caller) {
    if (caller.person === undefined) return null;
    const session = await this.prisma.webSession.findUniqueOrThrow({
      where: { id: caller.tokenId },
      include: { person: true },
    });
    return { id: session.id, person: session.person, expiresAt: session.expiresAt };
  }

  @ResolveField(() => [Membership])
  async memberships(@CurrentCaller() caller: Caller): Promise<{ team: Team | null; role: Role }[]> {
    const held = await this.sessions.membershipsOf(caller);
    const teams = await this.prisma.team.findMany({
      where: {
        id: { in: held.flatMap((m) => (m.teamId === null ? [] : [m.teamId])) },
        deletedAt: null,
      },
    });
    const byId = new Map<string, Team>(teams.map((team) => [team.id, team]));
    const memberships: { team: Team | null; role: Role }[] = [];
    for (const m of held) {
      const team = m.teamId === null ? null : byId.get(m.teamId);
      // A team deleted since sign-in is no membership.
      if (team !== undefined) memberships.push({ team, role: m.role });
    }
    return memberships;
  }

  @MinRole(Role.VIEWER)
  @Mutation(() => Membership, {
    description:
      "A signed-in person acts as another of their memberships (teamId null: their ADMIN one). The session's open subscriptions end: they were the other team's.",
  })
  async selectTeam(
    @CurrentCaller() caller: Caller,
    @Args('teamId', { type: () => ID, nullable: true }) teamId: string | null,
  ) {
    const chosen = await this.sessions.selectTeam(caller, teamId ?? null);
    const team =
      chosen.teamId === null
        ? null
        : await this.prisma.team.findUniqueOrThrow({ where: { id: chosen.teamId } });
    return { team, role: chosen.role };
  }

  @MinRole(Role.ADMIN)
  @Query(() => [GroupMapping], { description: 'Provider group → team and role, for sign-in.' })
  groupMappings() {
    return this.mappings.list();
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => GroupMapping, {
    description:
      'People whose provider groups include `group` get `role` in `teamId` (ADMIN: leave teamId out) from their next sign-in.',
  })
  setGroupMapping(
    @CurrentCaller() caller: Caller,
    @Args('group') group: string,
    @Args('role', { type: () => Role }) role: Role,
    @Args('teamId', { type: () => ID, nullable: true }) teamId?: string | null,
  ) {
    return this.mappings.set(caller, group, teamId ?? null, role);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => GroupMapping, {
    description: 'Removes the rule of `group` in `teamId` (none: its ADMIN rule).',
  })
  removeGroupMapping(
    @CurrentCaller() caller: Caller,
    @Args('group') group: string,
    @Args('teamId', { type: () => ID, nullable: true }) teamId?: string | null,
  ) {
    return this.mappings.remove(caller, group, teamId ?? null);
  }
}

@Resolver(() => GroupMapping)
export class GroupMappingResolver {
  constructor(private readonly teams: TeamsService) {}

  @ResolveField(() => Team, { nullable: true })
  team(
    @CurrentCaller() caller: Caller,
    @Parent() mapping: GroupMapping,
    @Loaders() loaders: RequestLoaders,
  ) {
    return mapping.teamId === null ? null : this.teams.getLoaded(loaders, caller, mapping.teamId);
  }
}

/** ApiToken.owner: the person who made the token while signed in. */
@Resolver(() => ApiToken)
export class ApiTokenOwnerResolver {
  constructor(private readonly prisma: PrismaService) {}

  @ResolveField(() => Person, {
    nullable: true,
    description: 'The person who created it signed in; null: owned by its team (or the fleet).',
  })
  async owner(@Parent() token: ApiToken) {
    const row = await this.prisma.apiToken.findUnique({
      where: { id: token.id },
      select: { owner: true },
    });
    return row?.owner ?? null;
  }
}

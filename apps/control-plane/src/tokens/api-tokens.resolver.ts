import {
  Args,
  Context,
  ID,
  Int,
  Mutation,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { Role, type Caller } from '../auth/caller.js';
import { CurrentCaller, MinRole } from '../auth/decorators.js';
import type { RequestContext } from '../auth/request-context.js';
import { Loaders, type RequestLoaders } from '../graphql/request-loaders.js';
import { ConnectionArgs } from '../graphql/connection.js';
import { Team } from '../teams/team.model.js';
import { TeamsService } from '../teams/teams.service.js';
import { ApiToken, ApiTokenConnection, CreatedApiToken } from './api-token.model.js';
import { ApiTokensService } from './api-tokens.service.js';

@Resolver(() => ApiToken)
export class ApiTokensResolver {
  constructor(
    private readonly tokens: ApiTokensService,
    private readonly teams: TeamsService,
  ) {}

  @Query(() => ApiToken, { description: 'The token this request was made with.' })
  me(@CurrentCaller() caller: Caller, @Context() request: RequestContext) {
    return this.tokens.current(caller, request.token);
  }

  @MinRole(Role.ADMIN)
  @Query(() => ApiTokenConnection, { description: 'Fleet-wide tokens (the ADMIN tokens).' })
  adminApiTokens(
    @Args() args: ConnectionArgs,
    @Args('includeRevoked', { defaultValue: false }) includeRevoked: boolean,
  ) {
    return this.tokens.list(null, args, includeRevoked);
  }

  @Mutation(() => CreatedApiToken, {
    description:
      'Admins: any token (ADMIN tokens without teamId). Members: MEMBER or VIEWER tokens of their own team.',
  })
  createApiToken(
    @CurrentCaller() caller: Caller,
    @Args('role', { type: () => Role }) role: Role,
    @Args('name') name: string,
    @Args('teamId', { type: () => ID, nullable: true }) teamId?: string | null,
  ) {
    return this.tokens.create(caller, { role, name, teamId });
  }

  @Mutation(() => ApiToken, {
    description: 'Final; revoking a revoked token returns it unchanged.',
  })
  revokeApiToken(@CurrentCaller() caller: Caller, @Args('id', { type: () => ID }) id: string) {
    return this.tokens.revoke(caller, id);
  }

  @MinRole(Role.ADMIN)
  @Mutation(() => ApiToken, {
    description:
      "Admins: the token's own rate and concurrency limits (null or left out: the fleet's default). Takes effect on its next request on every control plane.",
  })
  setApiTokenLimits(
    @Args('id', { type: () => ID }) id: string,
    @Args('ratePerSecond', { type: () => Int, nullable: true }) ratePerSecond?: number | null,
    @Args('rateBurst', { type: () => Int, nullable: true }) rateBurst?: number | null,
    @Args('maxConcurrent', { type: () => Int, nullable: true }) maxConcurrent?: number | null,
  ) {
    return this.tokens.setLimits(id, {
      ratePerSecond: ratePerSecond ?? null,
      rateBurst: rateBurst ?? null,
      maxConcurrent: maxConcurrent ?? null,
    });
  }

  @ResolveField(() => Team, { nullable: true, description: 'Null for fleet-wide admin tokens.' })
  team(
    @CurrentCaller() caller: Caller,
    @Parent() token: ApiToken,
    @Loaders() loaders: RequestLoaders,
  ) {
    return token.teamId === null ? null : this.teams.getLoaded(loaders, caller, token.teamId);
  }
}

@Resolver(() => Team)
export class TeamApiTokensResolver {
  constructor(private readonly tokens: ApiTokensService) {}

  @ResolveField(() => ApiTokenConnection)
  apiTokens(
    @Parent() team: Team,
    @Args() args: ConnectionArgs,
    @Args('includeRevoked', { defaultValue: false }) includeRevoked: boolean,
  ) {
    return this.tokens.list(team.id, args, includeRevoked);
  }
}

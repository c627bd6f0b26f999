import { Module } from '@nestjs/common';
import { TeamsModule } from '../teams/teams.module.js';
import { GroupMappingsService } from './group-mappings.service.js';
import { IdentityController } from './identity.controller.js';
import { CliSignInController } from './cli-sign-in.controller.js';
import { IdentityRuntime } from './identity-runtime.js';
import {
  ApiTokenOwnerResolver,
  GroupMappingResolver,
  IdentityResolver,
} from './identity.resolver.js';
import { SessionsService } from './sessions.service.js';
import { IdentityMetrics } from './identity-metrics.js';

/**
 * People signing in through OpenID Connect (docs/identity.md): the sign-in routes, sessions and
 * their recheck with the provider, the admins' group mapping. Without GPUSHARDS_OIDC_* the
 * routes answer 404 and API tokens are the only way in, as before.
 */
@Module({
  imports: [TeamsModule],
  controllers: [IdentityController, CliSignInController],
  providers: [
    IdentityMetrics,
    SessionsService,
    IdentityRuntime,
    GroupMappingsService,
    IdentityResolver,
    GroupMappingResolver,
    ApiTokenOwnerResolver,
  ],
})
export class IdentityModule {}

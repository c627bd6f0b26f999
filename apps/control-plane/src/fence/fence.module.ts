import { Global, Module } from '@nestjs/common';
import { TeamsModule } from '../teams/teams.module.js';
import { CapPolicies } from './cap-policies.js';
import { CapPolicyService } from './cap-policy.service.js';
import { FenceResolver } from './fence.resolver.js';
import { FenceService } from './fence.service.js';

/**
 * The host fence as the control plane sees it (docs/agent.md, "The host fence"): cap policies
 * (fleet default, per-team override), real usage and memory of no shard from heartbeats, and
 * VIOLATION shard events. Global: launch specs and reconcile replies carry the policy.
 */
@Global()
@Module({
  imports: [TeamsModule],
  providers: [CapPolicies, CapPolicyService, FenceService, FenceResolver],
  exports: [CapPolicies, FenceService],
})
export class FenceModule {}

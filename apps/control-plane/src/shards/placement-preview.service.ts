import { Injectable } from '@nestjs/common';
import { evaluateQuota, type QuotaPolicy } from '@gpushards/limits';
import { performance } from 'node:perf_hooks';
import { Role, type Caller } from '../auth/caller.js';
import { teamComputeRefusal } from '../compute/compute-input.js';
import { PrismaService } from '../database/index.js';
import { NotFoundError } from '../errors/domain-errors.js';
import { sizeOf } from '../graphql/size.model.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { QueueSignal } from '../placement/queue-signal.js';
import { couldEverFit } from './cached-fleet-placer.js';
import { noCapacityError, PlacementService } from '../placement/placement.service.js';
import { formatSize } from '../validation/sizes.js';
import { checkPlacementInput } from './shard-input.js';
import { ShardFleetCheck } from './shard-fleet-check.js';
import type { PlacementPreview } from './placement-preview.model.js';
import type { PlacementInput } from './shard-input.model.js';
import { targetTeam } from './target-team.js';
import { placementRequestOf, quotaPolicyOf, readTeamState, usageOf } from './team-quota.js';

/** placementPreview: where a request would go now, reserving nothing. */
@Injectable()
export class PlacementPreviewService {
  constructor(
    private readonly prisma: PrismaService,
    private readonly placement: PlacementService,
    private readonly cache: FleetCache,
    private readonly fleetCheck: ShardFleetCheck,
    private readonly queue: QueueSignal,
  ) {}

  /** Where the request would go now (on the cached fleet), or every host's reason why not. */
  async preview(caller: Caller, input: PlacementInput): Promise<PlacementPreview> {
    const started = performance.now();
    const request = checkPlacementInput(input);
    const teamId =
      caller.role === Role.ADMIN && !input.teamId ? undefined : targetTeam(caller, input.teamId);
    await this.fleetCheck.check(request, started);
    let policy: QuotaPolicy | undefined;
    let quotaProblem: string | null = null;
    if (teamId !== undefined) {
      const team = await readTeamState(this.prisma, teamId);
      if (team === undefined) throw new NotFoundError('team', teamId);
      policy = quotaPolicyOf(team);
      const decision = evaluateQuota(request, usageOf(team), policy);
      if (!decision.allowed) quotaProblem = decision.message;
      else
        quotaProblem =
          teamComputeRefusal(request.compute, team.maxComputeSharePercent)?.message ?? null;
    }
    const placementRequest = placementRequestOf(request, policy);
    const result = this.placement.place(placementRequest);
    const waitingAhead = this.queue.pendingCount();
    if (result.kind === 'placed') {
      const host = this.cache.hosts().find((h) => h.id === result.hostId);
      return {
        verdict: waitingAhead > 0 ? 'WAIT' : 'RUN_NOW',
        waitingAhead,
        fits: true,
        hostId: result.hostId,
        hostName: host?.name ?? result.hostId,
        gpuUuids: [...result.gpuUuids],
        reservedPerGpu: sizeOf(result.reservedBytesPerGpu),
        message:
          `fits on ${host?.name ?? result.hostId}: ${result.gpuUuids.length} GPU` +
          `${result.gpuUuids.length === 1 ? '' : 's'} × ${formatSize(result.reservedBytesPerGpu)} reserved`,
        hosts: [],
        quotaProblem,
      };
    }
    const error = noCapacityError(result);
    const hosts = (
      error.extensions['hosts'] as { hostId: string; hostName: string; reason: string }[]
    ).map((host, i) => ({ ...host, kind: result.reasons[i]!.reason.kind }));
    const ever = couldEverFit(placementRequest, this.cache.hosts());
    return {
      verdict: ever ? 'WAIT' : 'NEVER_FITS',
      waitingAhead,
      fits: false,
      hostId: null,
      hostName: null,
      gpuUuids: [],
      reservedPerGpu: null,
      message: result.message,
      hosts,
      quotaProblem,
    };
  }
}

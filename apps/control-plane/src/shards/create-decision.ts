/**
 * The decision on each createShard call of a batch, before anything is written: replay under
 * an idempotency key, the team's image allow-list, quota, compute share and priority class, a
 * non-preemptible class held to the team's guarantee, then queue behind waiting shards or place
 * on the cached fleet. Calls are decided in arrival order, each counting what the earlier ones
 * of the batch took, exactly as if they had run one after another. Separate from the group
 * commit (`ShardCreator`) because it is the rules of createShard, not the batching around them.
 */
import {
  bytes,
  checkPriorityClass,
  evaluateQuota,
  formatSize,
  priorityClasses,
  withinGuaranteeRequest,
  type TeamUsage,
} from '@gpushards/limits';
import { teamComputeRefusal } from '../compute/compute-input.js';
import {
  ImageNotAllowedError,
  NotFoundError,
  QuotaExceededError,
} from '../errors/domain-errors.js';
import { couldEverFit, type CachedFleetPlacer } from './cached-fleet-placer.js';
import type { Pending, Plan, Verdict } from './create-call.js';
import { idempotencyKeyOf } from './create-statements.js';
import { replayOf } from './idempotency.js';
import { imageAllowed } from './image-allow-list.js';
import type { ShardRequest } from './shard-input.js';
import type { ShardRecord } from './shard-record.js';
import {
  placementRequestOf,
  archivedTeamError,
  quotaError,
  quotaPolicyOf,
  usageOf,
  type TeamState,
} from './team-quota.js';

const CLASSES = priorityClasses();

/**
 * Decides each call in arrival order against its team's quota (counting what earlier calls
 * of the batch took) and places it on the cached fleet, holding its GPUs there so that the
 * next call sees them taken.
 */
export function decideBatch(
  batch: readonly Pending[],
  teams: ReadonlyMap<string, TeamState>,
  existing: ReadonlyMap<string, ShardRecord>,
  placer: CachedFleetPlacer,
  verdicts: Map<Pending, Verdict>,
  plans: Map<Pending, Plan>,
): void {
  const usage = new Map<string, TeamUsage>();
  /** Per team: bytes on the GPUs its guarantee covers, with this batch's non-preemptible plans. */
  const covered = new Map<string, number>();
  const firstByKey = new Map<string, Pending>();
  for (const pending of batch) {
    const { teamId, request } = pending;
    const team = teams.get(teamId);
    if (team === undefined) {
      verdicts.set(pending, { kind: 'failed', error: new NotFoundError('team', teamId) });
      continue;
    }
    if (team.archived) {
      verdicts.set(pending, { kind: 'failed', error: archivedTeamError(teamId) });
      continue;
    }
    if (request.idempotencyKey !== null) {
      const key = idempotencyKeyOf(teamId, request.idempotencyKey);
      const earlier = existing.get(key);
      if (earlier !== undefined) {
        verdicts.set(pending, replayVerdict(earlier, request));
        continue;
      }
      const first = firstByKey.get(key);
      if (first !== undefined) {
        verdicts.set(pending, { kind: 'follows', first });
        continue;
      }
      firstByKey.set(key, pending);
    }
    const images = team.allowedImages ?? [];
    if (!imageAllowed(request.image, images)) {
      verdicts.set(pending, {
        kind: 'failed',
        error: new ImageNotAllowedError(request.image, images, 'team'),
      });
      continue;
    }
    const policy = quotaPolicyOf(team);
    const held = usage.get(teamId) ?? usageOf(team);
    const decision = evaluateQuota(request, held, policy);
    if (!decision.allowed) {
      verdicts.set(pending, { kind: 'refused', error: quotaError(decision) });
      continue;
    }
    const computeRefusal = teamComputeRefusal(request.compute, team.maxComputeSharePercent);
    if (computeRefusal !== undefined) {
      verdicts.set(pending, { kind: 'refused', error: computeRefusal });
      continue;
    }
    const cls = checkPriorityClass(
      CLASSES,
      request.priorityClass,
      team.maxPriorityClass ?? undefined,
    );
    if (!cls.allowed) {
      verdicts.set(pending, {
        kind: 'refused',
        error: new QuotaExceededError(cls.message, { limit: 'maxPriorityClass' }),
      });
      continue;
    }
    const need = request.bytesPerGpu * request.gpuCount;
    const guarantee = Number(team.guaranteeBytes ?? 0n);
    const term = team.guaranteeGpuModel ?? undefined;
    const coveredBytes = cls.cls.preemptible ? 0 : (covered.get(teamId) ?? coveredOf(team));
    // A non-preemptible shard runs only on GPUs its team's guarantee covers, within it.
    const narrowed = cls.cls.preemptible
      ? placementRequestOf(request, policy)
      : withinGuaranteeRequest(placementRequestOf(request, policy), term);
    let planned: Plan | Verdict;
    if (!cls.cls.preemptible && (narrowed === undefined || coveredBytes + need > guarantee)) {
      // Only guaranteed capacity may hold a class that is never preempted.
      const on = term === undefined || term.trim() === '' ? '' : ` on "${term}" GPUs`;
      const message =
        narrowed === undefined
          ? `priority class "${cls.cls.name}" is never preempted, so it runs only on the ` +
            `GPUs of its team's guarantee ("${term}"), which the requested models exclude`
          : `priority class "${cls.cls.name}" is never preempted, so it runs only within the ` +
            `team's guarantee${on}: ${formatSize(bytes(coveredBytes))} held there + ` +
            `${formatSize(bytes(need))} requested > ${formatSize(bytes(guarantee))} guaranteed`;
      planned = request.queue
        ? { kind: 'queued', reason: message }
        : { kind: 'refused', error: new QuotaExceededError(message, { limit: 'guarantee' }) };
    } else if (request.queue && placer.shardsWaiting() && couldEverFit(narrowed!, placer.hosts())) {
      // Shards already wait: this one queues behind them (admission runs at once after).
      planned = { kind: 'queued', reason: 'shards are waiting ahead of it' };
    } else {
      planned = placer.plan(pending, narrowed!);
    }
    if (planned.kind !== 'planned') {
      verdicts.set(pending, planned);
      if (planned.kind !== 'queued') continue;
    } else {
      plans.set(pending, planned);
    }
    usage.set(teamId, {
      reservedBytes: bytes(held.reservedBytes + request.bytesPerGpu * request.gpuCount),
      shardCount: held.shardCount + 1,
    });
    if (!cls.cls.preemptible) covered.set(teamId, coveredBytes + need);
  }
}

/** The teams of the batch's calls whose class is never preempted (checked against the guarantee). */
export function nonPreemptibleTeamsOf(batch: readonly Pending[]): string[] {
  const teams = new Set<string>();
  for (const { teamId, request } of batch) {
    if (CLASSES.get(request.priorityClass)?.preemptible === false) teams.add(teamId);
  }
  return [...teams];
}

/** What the team holds on its guarantee's GPUs; read for every team placing a non-preemptible class. */
function coveredOf(team: TeamState): number {
  if (team.guaranteedModelBytes === null) {
    throw new Error(`createShard: team ${team.teamId}'s guaranteed-model bytes were not read`);
  }
  return Number(team.guaranteedModelBytes);
}

function replayVerdict(existing: ShardRecord, request: ShardRequest): Verdict {
  try {
    return { kind: 'replayed', shard: replayOf(existing, request) };
  } catch (error) {
    return { kind: 'failed', error };
  }
}

/**
 * Placement of createShard calls on this process's cached fleet: a call is placed and its GPUs
 * held in the cache (so the next call of the batch sees them taken), or it is told why not, and
 * whether it could fit the fleet at all. Separate from the decision and the write because both
 * ask it (the write again for calls whose GPUs another control plane took first), and because
 * `couldEverFit` is asked by placementPreview too.
 */
import { bytes, place, type Host, type PlacementRequest } from '@gpushards/limits';
import { randomUUID } from 'node:crypto';
import type { RawSql } from '../database/index.js';
import type { GpuCounts } from '../placement/cached-gpu.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { noCapacityError, PlacementService } from '../placement/placement.service.js';
import { QueueSignal } from '../placement/queue-signal.js';
import type { Pending, Plan, Verdict } from './create-call.js';
import { computeAddedBy, type LockedGpu } from './create-statements.js';

export class CachedFleetPlacer {
  constructor(
    private readonly placement: PlacementService,
    private readonly cache: FleetCache,
    private readonly queueSignal: QueueSignal,
  ) {}

  /** Places the call on the cached fleet and holds its GPUs there, or says why it cannot. */
  plan(pending: Pending, placementRequest: PlacementRequest): Plan | Verdict {
    const placed = this.placement.place(placementRequest);
    if (placed.kind === 'no-fit') {
      if (!pending.fresh) return { kind: 'needs-fresh-fleet' };
      if (pending.request.queue && couldEverFit(placementRequest, this.cache.hosts())) {
        return { kind: 'queued', reason: placed.message };
      }
      return { kind: 'refused', error: noCapacityError(placed) };
    }
    const holds = this.placement.holds();
    holds.hold(placed.gpuUuids, placed.reservedBytesPerGpu, computeAddedBy(pending.request));
    return {
      kind: 'planned',
      placementRequest,
      holds,
      shard: {
        shardId: randomUUID(),
        auditId: randomUUID(),
        caller: pending.caller,
        teamId: pending.teamId,
        request: pending.request,
        placed,
      },
    };
  }

  /** Whether shards already wait in the queue (a queueable call then waits behind them). */
  shardsWaiting(): boolean {
    return this.queueSignal.pendingCount() > 0;
  }

  /** The cached fleet. */
  hosts(): readonly Host[] {
    return this.cache.hosts();
  }

  /**
   * The batch's GPUs as its statement found them under their locks (`writeBatch`), `added`
   * being what the transaction added to them before that statement.
   */
  foundGpus(
    gpus: readonly LockedGpu[],
    added: ReadonlyMap<string, Readonly<GpuCounts>>,
    startedAt: number,
  ): void {
    this.cache.applyLocked(gpus, added, startedAt);
  }

  /**
   * Reads these hosts again inside the transaction, after a write found them no longer ONLINE
   * or a GPU of theirs missing; `added` is what the transaction itself added to GPUs so far.
   */
  reloadHosts(
    tx: RawSql,
    hostIds: readonly string[],
    added: ReadonlyMap<string, Readonly<GpuCounts>>,
  ): Promise<void> {
    return this.cache.reloadHosts(tx, hostIds, added);
  }
}

/**
 * Whether the request fits the fleet once everything held (memory and compute shares) has
 * ended and every host takes shards: a request that cannot (bigger than any GPU, a model or label the fleet lacks) is
 * refused at once instead of waiting forever.
 */
export function couldEverFit(request: PlacementRequest, fleet: readonly Host[]): boolean {
  const empty = fleet.map((host) => ({
    ...host,
    state: 'ONLINE' as const,
    gpus: host.gpus.map((gpu) => ({
      ...gpu,
      reservedBytes: bytes(0),
      guaranteedComputePermille: 0,
      isolatedComputePermille: 0,
    })),
  }));
  return place(request, empty).kind === 'placed';
}

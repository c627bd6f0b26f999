import { Injectable } from '@nestjs/common';
import {
  describeNoFitReason,
  type NoFit,
  type Placed,
  type PlacementRequest,
} from '@gpushards/limits';
import { NoCapacityError, type HostRejection } from '../errors/domain-errors.js';
import type { GpuCounts } from './cached-gpu.js';
import { FleetCache } from './fleet-cache.js';

/**
 * GPUs this process picked in transactions that have not ended. Settle exactly once, after
 * the transaction committed or rolled back.
 */
export class PlacementHolds {
  private readonly held: { uuids: readonly string[]; each: GpuCounts }[] = [];

  constructor(private readonly cache: FleetCache) {}

  /**
   * `size` bytes and a compute share on each GPU (`isolated`: the part of `permille` that is an
   * ISOLATED shard's, in the host's isolated partition).
   */
  hold(
    uuids: readonly string[],
    size: number,
    { permille, isolated }: { permille: number; isolated: number } = { permille: 0, isolated: 0 },
  ): void {
    const each = { bytes: size, permille, isolated };
    this.cache.hold(uuids, each);
    this.held.push({ uuids, each });
  }

  settle(committed: boolean): void {
    for (const { uuids, each } of this.held.splice(0)) {
      this.cache.release(uuids, each, committed);
    }
  }
}

/**
 * Placement against the in-memory fleet, made true by a conditional update in the caller's
 * transaction (ShardCreator's batch statement): reserved bytes rise only where
 * `gpu_memory_fits(...)` holds (libs/limits canReserve: room on the GPU less what processes of
 * no shard hold, and the caps on it and suspended within floor(total × ratio)) (and, for a compute share,
 * `gpu_compute_fits(...)`: the fit rule of libs/limits computeShareFits, isolated shares within
 * the host's isolated partition, the others within the rest) on a host that is still ONLINE.
 */
@Injectable()
export class PlacementService {
  constructor(private readonly cache: FleetCache) {}

  holds(): PlacementHolds {
    return new PlacementHolds(this.cache);
  }

  /**
   * Where the request would go on the cached fleet (this process's held picks counted as
   * taken), or why no host can take it. Reserves nothing: a guess until the caller's
   * conditional update makes it true.
   */
  place(request: PlacementRequest): Placed | NoFit {
    return this.cache.place(request);
  }
}

/** NO_CAPACITY with every host's reason, sizes formatted for people. */
export function noCapacityError(noFit: NoFit): NoCapacityError {
  const hosts: HostRejection[] = noFit.reasons.map((entry) => ({
    hostId: entry.hostId,
    hostName: entry.hostName,
    reason: describeNoFitReason(entry.reason),
  }));
  return new NoCapacityError(noFit.message, hosts);
}

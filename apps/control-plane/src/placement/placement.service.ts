import { Injectable } from '@nestjs/common';
import {
  describeNoFitReason,
  type NoFit,
  type Placed,
  type PlacementRequest,
} from '@gpushards/limits';
import { NoCapacityError, type HostRejection } from '../errors/domain-errors.js';
import { FleetCache } from './fleet-cache.js';

/**
 * GPUs this process picked in transactions that have not ended. Settle exactly once, after
 * the transaction committed or rolled back.
 */
export class PlacementHolds {
  private readonly held: { uuids: readonly string[]; size: number; permille: number }[] = [];

  constructor(private readonly cache: FleetCache) {}

  /** `size` bytes and `permille` of guaranteed compute on each GPU. */
  hold(uuids: readonly string[], size: number, permille = 0): void {
    this.cache.hold(uuids, size, permille);
    this.held.push({ uuids, size, permille });
  }

  settle(committed: boolean): void {
    for (const { uuids, size, permille } of this.held.splice(0)) {
      this.cache.release(uuids, size, committed, permille);
    }
  }
}

/**
 * Placement against the in-memory fleet, made true by a conditional update in the caller's
 * transaction (ShardCreator's batch statement): reserved bytes rise only where
 * `reserved_bytes + n <= floor(total_bytes * overcommit_ratio)` (and, for a compute share,
 * `guaranteed_compute_permille + share <= 1000`) on a host that is still ONLINE.
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

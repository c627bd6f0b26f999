import { Injectable } from '@nestjs/common';
import {
  describeNoFitReason,
  place,
  type NoFit,
  type Placed,
  type PlacementRequest,
} from '@gpushards/limits';
import { Prisma } from '../database/index.js';
import { NoCapacityError, type HostRejection } from '../errors/domain-errors.js';
import { FleetCache } from './fleet-cache.js';

/**
 * How many times one transaction places again after a conditional update found the cache
 * stale (another transaction took the GPUs first). Each miss reads that host again.
 */
export const MAX_STALE_PLACEMENTS = 16;

/**
 * Where placement looks: `cached` counts this process's in-flight picks (the fast path);
 * `fresh` is the fleet just read from the database plus this process's commits, and is what
 * a NO_CAPACITY answer must be based on.
 */
export type FleetView = 'cached' | 'fresh';

/** The cache could not keep up: every attempt lost its GPUs to another transaction. */
export interface Contended {
  readonly kind: 'contended';
}

/**
 * GPUs this process picked in transactions that have not ended. Settle exactly once, after
 * the transaction committed or rolled back.
 */
export class PlacementHolds {
  private readonly held: { uuids: readonly string[]; size: number }[] = [];

  constructor(private readonly cache: FleetCache) {}

  hold(uuids: readonly string[], size: number): void {
    this.cache.hold(uuids, size);
    this.held.push({ uuids, size });
  }

  /** Gives back the last hold at once: its conditional update missed. */
  dropLast(): void {
    const last = this.held.pop();
    if (last !== undefined) this.cache.release(last.uuids, last.size, false);
  }

  settle(committed: boolean): void {
    for (const { uuids, size } of this.held.splice(0)) {
      this.cache.release(uuids, size, committed);
    }
  }
}

/**
 * A statement that takes a placement's capacity and writes more in the same round trip: it
 * starts with `takeCapacityCtes(placed)` (CTEs `schedulable` and `taken`), writes only when
 * every GPU was taken, and its one row has `takenUuids` (the GPUs `taken` holds, NULL for none).
 */
export type ReserveStatement = (placed: Placed) => Prisma.Sql;

/** A row of a ReserveStatement. */
export interface ReserveRow {
  readonly takenUuids: string[] | null;
}

/**
 * The conditional update as CTEs: `schedulable` share-locks the host if it is still ONLINE,
 * `taken` raises each chosen GPU's reserved bytes where it still has room (RETURNING uuid).
 * All or nothing is up to the statement: `(SELECT count(*) FROM taken) = gpuCount`.
 */
export function takeCapacityCtes(placed: Placed): Prisma.Sql {
  const size = BigInt(placed.reservedBytesPerGpu);
  return Prisma.sql`
    schedulable AS (
      SELECT id FROM host WHERE id = ${placed.hostId} AND state = 'ONLINE' FOR SHARE
    ), taken AS (
      UPDATE gpu SET reserved_bytes = reserved_bytes + ${size}
       WHERE uuid = ANY(${[...placed.gpuUuids]}::text[])
         AND host_id = (SELECT id FROM schedulable)
         AND missing_since IS NULL
         AND reserved_bytes + ${size} <= floor(total_bytes * overcommit_ratio)
      RETURNING uuid
    )`;
}

/**
 * Placement against the in-memory fleet, made true by a conditional update in the caller's
 * transaction: `UPDATE gpu SET reserved_bytes = reserved_bytes + n WHERE ... AND
 * reserved_bytes + n <= floor(total_bytes * overcommit_ratio)` on a host that is still ONLINE.
 */
@Injectable()
export class PlacementService {
  constructor(private readonly cache: FleetCache) {}

  holds(): PlacementHolds {
    return new PlacementHolds(this.cache);
  }

  /** Where the request would go now, or why no host can take it. Reserves nothing. */
  preview(request: PlacementRequest): Placed | NoFit {
    return place(request, this.cache.hosts());
  }

  /**
   * Places the request and reserves its GPUs in `tx`. A miss (the cache was stale) reads that
   * host again and places again, up to MAX_STALE_PLACEMENTS times. Picks stay held in `holds`
   * until the caller settles them.
   */
  async reserve<R extends ReserveRow = ReserveRow>(
    tx: Prisma.TransactionClient,
    request: PlacementRequest,
    view: FleetView,
    holds: PlacementHolds,
    statement?: ReserveStatement,
  ): Promise<(Placed & { readonly row: R | undefined }) | NoFit | Contended> {
    for (let attempt = 0; attempt < MAX_STALE_PLACEMENTS; attempt++) {
      const fleet = view === 'fresh' ? this.cache.committedHosts() : this.cache.hosts();
      const result = place(request, fleet);
      if (result.kind === 'no-fit') return result;
      holds.hold(result.gpuUuids, result.reservedBytesPerGpu);
      if (statement === undefined) {
        if (await this.takeCapacity(tx, result)) return { ...result, row: undefined };
      } else {
        const row = (await tx.$queryRaw<R[]>(statement(result)))[0];
        const taken = row?.takenUuids ?? [];
        if (taken.length === result.gpuUuids.length) return { ...result, row };
        await this.giveBack(tx, result, taken);
      }
      holds.dropLast();
      await this.cache.reloadHost(tx, result.hostId);
    }
    return { kind: 'contended' };
  }

  /**
   * Raises each chosen GPU's reserved bytes if the host is still ONLINE and every GPU still
   * has room; all or nothing. The host row is share-locked, so a cordon, drain or offline
   * sweep of the host waits for this transaction and then sees its shard.
   */
  private async takeCapacity(tx: Prisma.TransactionClient, placed: Placed): Promise<boolean> {
    const taken = await tx.$queryRaw<{ uuid: string }[]>`
      WITH ${takeCapacityCtes(placed)} SELECT uuid FROM taken`;
    if (taken.length === placed.gpuUuids.length) return true;
    await this.giveBack(
      tx,
      placed,
      taken.map((gpu) => gpu.uuid),
    );
    return false;
  }

  /** Undoes the part of a conditional update that succeeded when not every GPU had room. */
  private async giveBack(
    tx: Prisma.TransactionClient,
    placed: Placed,
    taken: readonly string[],
  ): Promise<void> {
    if (taken.length === 0) return;
    await tx.$executeRaw`
      UPDATE gpu SET reserved_bytes = reserved_bytes - ${BigInt(placed.reservedBytesPerGpu)}
       WHERE uuid = ANY(${[...taken]}::text[])`;
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

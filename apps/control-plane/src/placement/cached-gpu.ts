import { bytes, gpuUuid, type Bytes, type GpuUuid, type HostId } from '@gpushards/limits';
import type { GpuRow } from './fleet-reads.js';

/**
 * What a GPU holds, as the fleet cache counts it: reserved bytes, compute shares, and the caps
 * of suspended shards that come back to it.
 */
export interface GpuCounts {
  bytes: number;
  /** Guaranteed compute shares, permille (isolated ones included). */
  permille: number;
  /** Of `permille`, the shares of ISOLATED shards. */
  isolated: number;
  /** Caps of its SUSPENDED shards (docs/elastic.md); absent: 0. */
  suspended?: number;
}

/** One GPU of the fleet cache: a limits `Gpu` whose counts are committed + held. */
export interface CachedGpu {
  readonly uuid: GpuUuid;
  readonly hostId: HostId;
  readonly index: number;
  readonly model: string;
  readonly totalBytes: Bytes;
  readonly overcommitRatio: number;
  /** What placement sees: committed + held. */
  reservedBytes: Bytes;
  suspendedBytes: Bytes;
  /** Held by processes of no shard, as its agent last reported: promised to nobody. */
  unownedBytes: Bytes;
  guaranteedComputePermille: number;
  isolatedComputePermille: number;
  /** The host's isolated (MPS) partition on this GPU, as last registered. */
  isolatedPoolPermille: number;
  /** As the database had it at the last read, plus this process's commits since. */
  readonly committed: GpuCounts;
  /** Picked by this process's transactions that have not ended yet. */
  readonly held: GpuCounts;
  /**
   * performance.now() when this process last applied a commit of its own to it: a read that
   * started before then may predate that commit and must not overwrite it.
   */
  localAt: number;
}

/** A GPU row's counts (what the database has committed). */
export function countsOfRow(row: GpuRow): GpuCounts {
  return {
    bytes: Number(row.reservedBytes),
    permille: row.guaranteedComputePermille,
    isolated: row.isolatedComputePermille,
    suspended: Number(row.suspendedBytes),
  };
}

/** `into` += sign × `add`, never below 0. */
export function addCounts(into: GpuCounts, add: Readonly<GpuCounts>, sign: 1 | -1 = 1): void {
  into.bytes = Math.max(0, into.bytes + sign * add.bytes);
  into.permille = Math.max(0, into.permille + sign * add.permille);
  into.isolated = Math.max(0, into.isolated + sign * add.isolated);
  into.suspended = Math.max(0, (into.suspended ?? 0) + sign * (add.suspended ?? 0));
}

/** Whether any count of `now` is below `before` (room was freed). */
export function lessThan(now: Readonly<GpuCounts>, before: Readonly<GpuCounts>): boolean {
  return (
    now.bytes < before.bytes ||
    now.permille < before.permille ||
    now.isolated < before.isolated ||
    (now.suspended ?? 0) < (before.suspended ?? 0)
  );
}

/** Sets what placement sees from committed + held; false when nothing changed. */
export function recount(gpu: CachedGpu): boolean {
  const reserved = gpu.committed.bytes + gpu.held.bytes;
  const permille = gpu.committed.permille + gpu.held.permille;
  const isolated = gpu.committed.isolated + gpu.held.isolated;
  const suspended = (gpu.committed.suspended ?? 0) + (gpu.held.suspended ?? 0);
  if (
    reserved === gpu.reservedBytes &&
    permille === gpu.guaranteedComputePermille &&
    isolated === gpu.isolatedComputePermille &&
    suspended === gpu.suspendedBytes
  ) {
    return false;
  }
  gpu.reservedBytes = bytes(reserved);
  gpu.suspendedBytes = bytes(suspended);
  gpu.guaranteedComputePermille = permille;
  gpu.isolatedComputePermille = isolated;
  return true;
}

/**
 * A GPU from its row read at `startedAt`; it keeps what this process holds on it, and a
 * commit of this process applied after the read started wins over the row.
 */
export function cachedGpuOf(
  row: GpuRow,
  hostId: HostId,
  cached: CachedGpu | undefined,
  startedAt: number,
): CachedGpu {
  const local = cached !== undefined && cached.localAt > startedAt;
  const gpu: CachedGpu = {
    uuid: gpuUuid(row.uuid),
    hostId,
    index: row.index,
    model: row.model,
    totalBytes: bytes(Number(row.totalBytes)),
    overcommitRatio: row.overcommitRatio,
    reservedBytes: bytes(0),
    suspendedBytes: bytes(0),
    unownedBytes: bytes(Number(row.unattributedBytes)),
    guaranteedComputePermille: 0,
    isolatedComputePermille: 0,
    isolatedPoolPermille: row.isolatedPoolPermille,
    committed: local ? { ...cached.committed } : countsOfRow(row),
    held:
      cached === undefined
        ? { bytes: 0, permille: 0, isolated: 0, suspended: 0 }
        : { ...cached.held },
    localAt: local ? cached.localAt : Number.NEGATIVE_INFINITY,
  };
  recount(gpu);
  return gpu;
}

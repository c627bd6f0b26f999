import type { Heartbeat } from '@gpushards/protocol';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * A field a heartbeat did not report, in the columns below: every reported value is ≥ 0
 * (bytes, a busy ratio, a time), and a column of one type with no NULLs binds the same way
 * on both databases.
 */
export const NOT_REPORTED = -1;

/** One heartbeat of a batch. */
export interface HostHeartbeat {
  readonly hostId: string;
  readonly heartbeat: Heartbeat;
}

/**
 * What a batch of heartbeats reports, as parallel columns (fleet-statements.ts writes them
 * with one statement per table):
 * - per GPU: its used bytes, and the memory of no shard on it (the host fence's
 *   unattributedBytesPerGpu; NOT_REPORTED where the heartbeat did not carry it);
 * - per shard and GPU, the latest reading: used bytes, real bytes (the fence's), busy ratio
 *   and last kernel launch (the compute ledger's, epoch ms), each NOT_REPORTED where absent;
 * - per shard, GPU and `sentAt`, a usage sample.
 * Every row names the host that reported it; a row counts only for GPUs and shards of that
 * host. A host whose heartbeats come twice in one batch has one GPU and one reading row per
 * GPU: each field as the last heartbeat that reported it says, as when they were written one
 * after the other.
 */
export class HeartbeatRows {
  readonly gpuHostIds: string[] = [];
  readonly gpuUuids: string[] = [];
  readonly gpuUsed: bigint[] = [];
  readonly gpuUnattributed: bigint[] = [];
  readonly readingHostIds: string[] = [];
  readonly readingShardIds: string[] = [];
  readonly readingGpuUuids: string[] = [];
  readonly readingUsed: bigint[] = [];
  readonly readingReal: bigint[] = [];
  readonly readingBusy: number[] = [];
  readonly readingLastKernelMs: bigint[] = [];
  readonly sampleHostIds: string[] = [];
  readonly sampleShardIds: string[] = [];
  readonly sampleGpuUuids: string[] = [];
  readonly sampleUsed: bigint[] = [];
  readonly sampleAt: Date[] = [];

  private readonly gpuRow = new Map<string, number>();
  private readonly readingRow = new Map<string, number>();

  /** The rows of the heartbeats of `hosts` (the others' are left out), in `beats` order. */
  static of(beats: readonly HostHeartbeat[], hosts: ReadonlySet<string>): HeartbeatRows {
    const rows = new HeartbeatRows();
    for (const { hostId, heartbeat } of beats) {
      if (hosts.has(hostId)) rows.add(hostId, heartbeat);
    }
    return rows;
  }

  /** A heartbeat's rows, over what earlier heartbeats of the same host reported. */
  add(hostId: string, heartbeat: Heartbeat): void {
    const unattributed =
      heartbeat.unattributedBytesPerGpu === undefined
        ? undefined
        : new Map(heartbeat.unattributedBytesPerGpu.map((gpu) => [gpu.gpuUuid, gpu.bytes]));
    for (const gpu of heartbeat.gpus) {
      const row = this.rowOf(this.gpuRow, `${hostId} ${gpu.uuid}`, () => {
        this.gpuHostIds.push(hostId);
        this.gpuUuids.push(gpu.uuid);
        this.gpuUsed.push(0n);
        this.gpuUnattributed.push(BigInt(NOT_REPORTED));
      });
      this.gpuUsed[row] = BigInt(gpu.usedBytes);
      // The fence reports the GPUs with memory of no shard: any other GPU it sampled has none.
      if (unattributed !== undefined) {
        this.gpuUnattributed[row] = BigInt(unattributed.get(gpu.uuid) ?? 0);
      }
    }
    const at = new Date(heartbeat.sentAt);
    const sentAt = at.getTime();
    for (const shard of heartbeat.shards) {
      if (!UUID.test(shard.shardId)) continue;
      for (const gpu of shard.usedBytesPerGpu) {
        this.sampleHostIds.push(hostId);
        this.sampleShardIds.push(shard.shardId);
        this.sampleGpuUuids.push(gpu.gpuUuid);
        this.sampleUsed.push(BigInt(gpu.usedBytes));
        this.sampleAt.push(at);
        this.readingUsed[this.readingOf(hostId, shard.shardId, gpu.gpuUuid)] = BigInt(
          gpu.usedBytes,
        );
      }
      for (const gpu of shard.realBytesPerGpu ?? []) {
        this.readingReal[this.readingOf(hostId, shard.shardId, gpu.gpuUuid)] = BigInt(
          gpu.realBytes,
        );
      }
      for (const gpu of shard.activityPerGpu ?? []) {
        const row = this.readingOf(hostId, shard.shardId, gpu.gpuUuid);
        if (gpu.busyRatio !== undefined) this.readingBusy[row] = gpu.busyRatio;
        if (gpu.lastKernelSeconds !== undefined && Number.isFinite(sentAt)) {
          // Whole milliseconds, as a Date (and the column) keeps them.
          this.readingLastKernelMs[row] = BigInt(Math.trunc(sentAt - gpu.lastKernelSeconds * 1000));
        }
      }
    }
  }

  private readingOf(hostId: string, shardId: string, gpuUuid: string): number {
    return this.rowOf(this.readingRow, `${hostId} ${shardId.toLowerCase()} ${gpuUuid}`, () => {
      this.readingHostIds.push(hostId);
      this.readingShardIds.push(shardId);
      this.readingGpuUuids.push(gpuUuid);
      this.readingUsed.push(BigInt(NOT_REPORTED));
      this.readingReal.push(BigInt(NOT_REPORTED));
      this.readingBusy.push(NOT_REPORTED);
      this.readingLastKernelMs.push(BigInt(NOT_REPORTED));
    });
  }

  private rowOf(rows: Map<string, number>, key: string, open: () => void): number {
    let row = rows.get(key);
    if (row === undefined) {
      row = rows.size;
      rows.set(key, row);
      open();
    }
    return row;
  }
}

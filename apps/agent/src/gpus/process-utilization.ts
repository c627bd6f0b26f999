/**
 * NVML's per-process utilization (nvmlDeviceGetProcessUtilization): what the compute fence
 * reads to see every process's kernels, libvgpu.so's or not (docs/agent.md, "Compute fence").
 */

/**
 * nvmlProcessUtilizationSample_t: pid u32, 4 bytes of padding, timeStamp u64 (microseconds
 * since the Unix epoch), smUtil, memUtil, encUtil, decUtil u32 (percent).
 */
export const PROCESS_UTILIZATION_SAMPLE_SIZE = 32;
const FIELDS = { pid: 0, timeStamp: 8, smUtil: 16 } as const;

/** One sample of one process on one GPU, as the driver reports it (host PIDs). */
export interface NvmlProcessUtilization {
  readonly pid: number;
  /** The end of the sample's period, microseconds since the Unix epoch. */
  readonly timestampUs: number;
  /** Percent of the period a kernel of the process ran. */
  readonly smPercent: number;
}

/** The first `count` samples of a buffer NVML filled. */
export function decodeProcessUtilization(buffer: Buffer, count: number): NvmlProcessUtilization[] {
  const samples: NvmlProcessUtilization[] = [];
  for (let i = 0; i < count; i++) {
    const base = i * PROCESS_UTILIZATION_SAMPLE_SIZE;
    if (base + PROCESS_UTILIZATION_SAMPLE_SIZE > buffer.length) break;
    const pid = buffer.readUInt32LE(base + FIELDS.pid);
    if (pid === 0) continue;
    const stamp = buffer.readBigUInt64LE(base + FIELDS.timeStamp);
    samples.push({
      pid,
      timestampUs: stamp <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(stamp) : 0,
      smPercent: Math.min(100, buffer.readUInt32LE(base + FIELDS.smUtil)),
    });
  }
  return samples;
}

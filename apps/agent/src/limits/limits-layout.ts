/**
 * The limits file's byte layout (native/vgpu's gpushards_limits.h): written only by the agent,
 * bind-mounted read-only into the container at /etc/gpushards/limits. limits-layout.test.ts
 * holds these numbers against the `region-layout` program built from the C header.
 */
import type { Field } from '../regions/region-layout.js';

export const LIMITS_MAGIC = 0x31544d494c555047n; // the bytes "GPULIMT1"
export const LIMITS_VERSION = 1;
export const LIMITS_MAX_DEVICES = 16;
export const LIMITS_DEVICE_STATE_ACTIVE = 1;
/** The header checksum (FNV-1a 64) covers bytes [0, LIMITS_CHECKSUM_BYTES). */
export const LIMITS_CHECKSUM_BYTES = 40;
/** compute_turns: 0 is what an older agent's file holds (CPU turns in a shard). */
export const LIMITS_COMPUTE_TURNS_UNSET = 0;
export const LIMITS_COMPUTE_TURNS_CPU = 1;
export const LIMITS_COMPUTE_TURNS_GPU = 2;
/** memory_state (docs/elastic.md): where the shard's GPU memory is, as libvgpu.so reads it. */
export const LIMITS_MEMORY_RESIDENT = 0;
export const LIMITS_MEMORY_SUSPENDED = 1;

export const LIMITS_HEADER_FIELDS = {
  magic: { offset: 0, size: 8 },
  version: { offset: 8, size: 4 },
  header_size: { offset: 12, size: 4 },
  total_size: { offset: 16, size: 8 },
  max_devices: { offset: 24, size: 4 },
  device_size: { offset: 28, size: 4 },
  device_count: { offset: 32, size: 4 },
  checksum: { offset: 40, size: 8 },
  /** The shard's id, NUL-terminated (libvgpu.so's ledger member, over GPUSHARDS_SHARD_ID). */
  shard_id: { offset: 48, size: 48 },
  /** Where the shard waits for its compute turns (LIMITS_COMPUTE_TURNS_*); fixed while it runs. */
  compute_turns: { offset: 96, size: 4 },
  /**
   * LIMITS_MEMORY_*: set by the agent after it locked every CUDA process of the shard and
   * before it checkpoints them, cleared after every one is restored and unlocked. While it is
   * set every hooked CUDA call waits in libvgpu.so and rings the region's wake bell.
   */
  memory_state: { offset: 100, size: 4 },
  /**
   * How long libvgpu.so retries an allocation the driver refused although the shard's budget
   * allows it (memory someone else holds past what placement promised: the fence frees it);
   * 0: libvgpu.so's default, 300 ms. The fence's worst case (docs/agent.md, "Pressure").
   */
  pressure_wait_ms: { offset: 104, size: 4 },
} as const satisfies Record<string, Field>;

export const LIMITS_DEVICE_FIELDS = {
  uuid: { offset: 0, size: 16 },
  state: { offset: 16, size: 4 },
  limit_bytes: { offset: 24, size: 8 },
  context_bytes: { offset: 32, size: 8 },
  pool_growth_bytes: { offset: 40, size: 8 },
  real_bytes: { offset: 48, size: 8 },
  real_sampled_at_ms: { offset: 56, size: 8 },
  /** Compute share on this GPU in permille (1..1000), 0 = unset (docs/compute.md). */
  compute_share_permille: { offset: 64, size: 4 },
  /** 0 unset (guaranteed), 1 guaranteed, 2 capped, 3 isolated. */
  compute_mode: { offset: 68, size: 4 },
  /** 1..100: the MPS active-thread percentage libvgpu.so forces at cuInit; 0 = no MPS partition. */
  mps_thread_percent: { offset: 72, size: 4 },
} as const satisfies Record<string, Field>;

export const LIMITS_HEADER_SIZE = 128;
export const LIMITS_DEVICE_SIZE = 128;
export const LIMITS_DEVICES_OFFSET = LIMITS_HEADER_SIZE;
export const LIMITS_SIZE = LIMITS_DEVICES_OFFSET + LIMITS_DEVICE_SIZE * LIMITS_MAX_DEVICES;

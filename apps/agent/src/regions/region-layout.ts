/**
 * The shared region's byte layout, as native/vgpu/include/gpushards_region.h defines it.
 * region-layout.test.ts holds every number here against the `region-layout` program built
 * from that header, so the C side and this reader cannot drift apart unnoticed.
 */
export interface Field {
  readonly offset: number;
  readonly size: number;
}

export const REGION_MAGIC = 0x3144524853555047n; // the bytes "GPUSHRD1"
export const REGION_VERSION = 1;
export const MAX_DEVICES = 16;
export const MAX_SLOTS = 1024;
/** Slots that the header's ipc_importers has a bit for: the first 256. */
export const IPC_IMPORTER_SLOTS = 256;
export const DEVICE_STATE_ACTIVE = 1;
/** The header checksum covers bytes [0, CHECKSUM_BYTES): the fields before it. */
export const CHECKSUM_BYTES = 56;

export const HEADER_FIELDS = {
  magic: { offset: 0, size: 8 },
  version: { offset: 8, size: 4 },
  header_size: { offset: 12, size: 4 },
  total_size: { offset: 16, size: 8 },
  max_devices: { offset: 24, size: 4 },
  max_slots: { offset: 28, size: 4 },
  device_size: { offset: 32, size: 4 },
  slot_size: { offset: 36, size: 4 },
  devices_offset: { offset: 40, size: 8 },
  slots_offset: { offset: 48, size: 8 },
  checksum: { offset: 56, size: 8 },
  device_count: { offset: 64, size: 4 },
  /**
   * Nonzero: a process whose slot is past ipc_importers' bits opened a CUDA IPC import;
   * nothing says when it ends, so every suspend of the shard is refused while the region lasts.
   */
  ipc_importers_unlisted: { offset: 68, size: 4 },
  /**
   * Elastic memory (docs/elastic.md): libvgpu.so counts a call that found the shard suspended
   * (wake_requests), stamps it (wake_requested_ns, CLOCK_MONOTONIC) and then pwrite(2)s zeros
   * over `bell`: a write through a mapping raises no inotify event, a pwrite does.
   */
  wake_requests: { offset: 72, size: 8 },
  wake_requested_ns: { offset: 80, size: 8 },
  bell: { offset: 88, size: 8 },
  /**
   * CUDA IPC imports (docs/elastic.md, "What cannot be suspended"): bit s (little-endian
   * 64-bit word s / 64, bit s % 64) is set while the process in slot s holds memory another
   * process shared with it (cuIpcOpenMemHandle), which the driver's checkpoint API cannot
   * restore. A bit counts only while its slot's process is alive: a SIGKILLed importer's stays
   * set until its slot is reclaimed.
   */
  ipc_importers: { offset: 96, size: IPC_IMPORTER_SLOTS / 8 },
} as const satisfies Record<string, Field>;

export const DEVICE_FIELDS = {
  uuid: { offset: 0, size: 16 },
  state: { offset: 16, size: 4 },
  limit_bytes: { offset: 24, size: 8 },
  used_bytes: { offset: 32, size: 8 },
  context_bytes: { offset: 40, size: 8 },
  peak_bytes: { offset: 48, size: 8 },
  total_bytes: { offset: 56, size: 8 },
  last_launch_ns: { offset: 72, size: 8 },
  /**
   * Issue #31: an allocation the driver refused although the shard's budget allowed it
   * (pressure_count, pressure_ns CLOCK_MONOTONIC of the last), rung like the wake bell.
   */
  pressure_count: { offset: 80, size: 8 },
  pressure_ns: { offset: 88, size: 8 },
} as const satisfies Record<string, Field>;

export const SLOT_FIELDS = {
  pid: { offset: 0, size: 4 },
  last_launch_s: { offset: 4, size: 4 },
  start_time: { offset: 8, size: 8 },
} as const satisfies Record<string, Field>;

export const HEADER_SIZE = 256;
export const DEVICE_SIZE = 128;
export const SLOT_SIZE = 144;
export const DEVICES_OFFSET = HEADER_SIZE;
export const SLOTS_OFFSET = DEVICES_OFFSET + DEVICE_SIZE * MAX_DEVICES;
export const REGION_SIZE = SLOTS_OFFSET + SLOT_SIZE * MAX_SLOTS;

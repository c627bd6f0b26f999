import {
  CHECKSUM_BYTES,
  DEVICES_OFFSET,
  DEVICE_FIELDS,
  DEVICE_SIZE,
  DEVICE_STATE_ACTIVE,
  HEADER_FIELDS,
  HEADER_SIZE,
  MAX_DEVICES,
  MAX_SLOTS,
  REGION_MAGIC,
  REGION_SIZE,
  REGION_VERSION,
  SLOT_FIELDS,
  SLOTS_OFFSET,
  SLOT_SIZE,
} from '../regions/region-layout.js';
import { fnv1a64, parseUuid } from '../regions/region-file.js';

export interface FixtureDevice {
  uuid: string;
  limitBytes?: number;
  usedBytes?: number;
  contextBytes?: number;
  peakBytes?: number;
  totalBytes?: number;
  /** CLOCK_MONOTONIC ns of the last launch; default 0n (none). */
  lastLaunchNs?: bigint;
  /** Allocations refused under pressure (#31) and when the last was; default 0n. */
  pressureCount?: bigint;
  pressureNs?: bigint;
  /** Default ACTIVE. */
  state?: number;
}

export interface FixtureProcess {
  pid: number;
  startTime?: bigint;
  lastLaunchSeconds?: number;
  /** Its ipc_importers bit: it holds a CUDA IPC import. */
  ipcImports?: boolean;
}

/** The wake counters of the header (docs/elastic.md); default 0n. */
export interface FixtureWake {
  wakeRequests?: bigint;
  wakeRequestedNs?: bigint;
  /** ipc_importers_unlisted; default false. */
  ipcImportersUnlisted?: boolean;
}

/** A region file as libvgpu.so writes it, for tests that run without the interposer. */
export function buildRegion(
  devices: readonly FixtureDevice[],
  version = REGION_VERSION,
  processes: readonly FixtureProcess[] = [],
  wake: FixtureWake = {},
): Buffer {
  const buffer = Buffer.alloc(REGION_SIZE);
  buffer.writeBigUInt64LE(REGION_MAGIC, HEADER_FIELDS.magic.offset);
  buffer.writeUInt32LE(version, HEADER_FIELDS.version.offset);
  buffer.writeUInt32LE(HEADER_SIZE, HEADER_FIELDS.header_size.offset);
  buffer.writeBigUInt64LE(BigInt(REGION_SIZE), HEADER_FIELDS.total_size.offset);
  buffer.writeUInt32LE(MAX_DEVICES, HEADER_FIELDS.max_devices.offset);
  buffer.writeUInt32LE(MAX_SLOTS, HEADER_FIELDS.max_slots.offset);
  buffer.writeUInt32LE(DEVICE_SIZE, HEADER_FIELDS.device_size.offset);
  buffer.writeUInt32LE(SLOT_SIZE, HEADER_FIELDS.slot_size.offset);
  buffer.writeBigUInt64LE(BigInt(DEVICES_OFFSET), HEADER_FIELDS.devices_offset.offset);
  buffer.writeBigUInt64LE(BigInt(SLOTS_OFFSET), HEADER_FIELDS.slots_offset.offset);
  buffer.writeBigUInt64LE(
    fnv1a64(buffer.subarray(0, CHECKSUM_BYTES)),
    HEADER_FIELDS.checksum.offset,
  );
  buffer.writeUInt32LE(devices.length, HEADER_FIELDS.device_count.offset);
  buffer.writeBigUInt64LE(wake.wakeRequests ?? 0n, HEADER_FIELDS.wake_requests.offset);
  buffer.writeBigUInt64LE(wake.wakeRequestedNs ?? 0n, HEADER_FIELDS.wake_requested_ns.offset);
  devices.forEach((device, slot) => {
    const base = DEVICES_OFFSET + slot * DEVICE_SIZE;
    parseUuid(device.uuid).copy(buffer, base + DEVICE_FIELDS.uuid.offset);
    buffer.writeUInt32LE(device.state ?? DEVICE_STATE_ACTIVE, base + DEVICE_FIELDS.state.offset);
    const counters = [
      ['limit_bytes', device.limitBytes],
      ['used_bytes', device.usedBytes],
      ['context_bytes', device.contextBytes],
      ['peak_bytes', device.peakBytes],
      ['total_bytes', device.totalBytes],
    ] as const;
    for (const [field, value] of counters) {
      buffer.writeBigUInt64LE(BigInt(value ?? 0), base + DEVICE_FIELDS[field].offset);
    }
    buffer.writeBigUInt64LE(device.lastLaunchNs ?? 0n, base + DEVICE_FIELDS.last_launch_ns.offset);
    buffer.writeBigUInt64LE(device.pressureCount ?? 0n, base + DEVICE_FIELDS.pressure_count.offset);
    buffer.writeBigUInt64LE(device.pressureNs ?? 0n, base + DEVICE_FIELDS.pressure_ns.offset);
  });
  processes.forEach((process, slot) => {
    const base = SLOTS_OFFSET + slot * SLOT_SIZE;
    buffer.writeInt32LE(process.pid, base + SLOT_FIELDS.pid.offset);
    buffer.writeUInt32LE(process.lastLaunchSeconds ?? 0, base + SLOT_FIELDS.last_launch_s.offset);
    buffer.writeBigUInt64LE(process.startTime ?? 0n, base + SLOT_FIELDS.start_time.offset);
    if (process.ipcImports === true) {
      const at = HEADER_FIELDS.ipc_importers.offset + 8 * Math.floor(slot / 64);
      buffer.writeBigUInt64LE(buffer.readBigUInt64LE(at) | (1n << BigInt(slot % 64)), at);
    }
  });
  buffer.writeUInt32LE(
    wake.ipcImportersUnlisted === true ? 1 : 0,
    HEADER_FIELDS.ipc_importers_unlisted.offset,
  );
  return buffer;
}

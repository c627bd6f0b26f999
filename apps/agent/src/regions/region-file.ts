import { constants, promises as fs } from 'node:fs';

import {
  CHECKSUM_BYTES,
  DEVICES_OFFSET,
  DEVICE_FIELDS,
  DEVICE_SIZE,
  DEVICE_STATE_ACTIVE,
  HEADER_FIELDS,
  HEADER_SIZE,
  IPC_IMPORTER_SLOTS,
  MAX_DEVICES,
  MAX_SLOTS,
  REGION_MAGIC,
  REGION_SIZE,
  REGION_VERSION,
  SLOT_FIELDS,
  SLOTS_OFFSET,
  SLOT_SIZE,
} from './region-layout.js';

/**
 * Reads and writes a shard's region file from the host. The container can write that file
 * (its processes map it), so nothing in it is trusted: the file is opened without following
 * symbolic links, must be a regular file, and is read with read(2) into a copy (never
 * mapped: a container truncating a mapped file would crash the agent with SIGBUS).
 */

export type RegionErrorCode =
  'MISSING' | 'NOT_A_FILE' | 'TRUNCATED' | 'BAD_MAGIC' | 'UNSUPPORTED_VERSION' | 'CORRUPT';

export class RegionError extends Error {
  override name = 'RegionError';

  constructor(
    readonly code: RegionErrorCode,
    readonly path: string,
    detail: string,
  ) {
    super(`region file ${path}: ${detail}`);
  }
}

export interface RegionDevice {
  /** Index in the region's device table. */
  readonly slot: number;
  /** As NVML shows it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx. */
  readonly uuid: string;
  readonly limitBytes: number;
  readonly usedBytes: number;
  readonly contextBytes: number;
  readonly peakBytes: number;
  readonly totalBytes: number;
  /**
   * CLOCK_MONOTONIC ns of the container's last kernel launch through libvgpu.so on this GPU;
   * 0n = none. Only this container writes its region, so unlike the ledger's stamps no other
   * shard can forge or erase it.
   */
  readonly lastLaunchNs: bigint;
  /** Allocations refused under pressure on this GPU, and CLOCK_MONOTONIC ns of the last (#31). */
  readonly pressureCount: bigint;
  readonly pressureNs: bigint;
}

export interface Region {
  readonly version: number;
  /** The ACTIVE devices, the ones some process of the container has used. */
  readonly devices: readonly RegionDevice[];
  /** Calls that found the shard suspended, and CLOCK_MONOTONIC ns of the last (docs/elastic.md). */
  readonly wakeRequests: bigint;
  readonly wakeRequestedNs: bigint;
}

/** What the agent reads: the header and the device table, not the per-process slots. */
const READ_BYTES = DEVICES_OFFSET + DEVICE_SIZE * MAX_DEVICES;

export async function readRegion(path: string): Promise<Region> {
  const bytes = await readPrefix(path, READ_BYTES);
  return parseRegion(bytes.buffer, bytes.fileSize, path);
}

/** A process of the container that charged memory through libvgpu.so (a slot in use). */
export interface RegionProcess {
  /** As the process sees itself: its PID in the container's PID namespace. */
  readonly pid: number;
  /** Clock ticks after boot (/proc/<pid>/stat field 22); 0 = unknown. */
  readonly startTime: bigint;
  /** The CLOCK_MONOTONIC second of its last launch through libvgpu.so; 0 = none. */
  readonly lastLaunchSeconds: number;
}

/** A region read whole: its ACTIVE devices and the processes with a slot in use. */
export interface RegionWithProcesses extends Region {
  readonly processes: readonly RegionProcess[];
  /**
   * The processes among them whose ipc_importers bit is set: they said they hold a CUDA IPC
   * import. Alive or not: whether each still runs is the reader's to check.
   */
  readonly ipcImporters: readonly RegionProcess[];
  /** A process past the bits opened one (ipc_importers_unlisted): no suspend is safe. */
  readonly ipcImportersUnlisted: boolean;
}

/** The region with its process slots (the whole file, about 150 KiB); throws RegionError. */
export async function readRegionWithProcesses(path: string): Promise<RegionWithProcesses> {
  const { buffer, fileSize } = await readPrefix(path, REGION_SIZE);
  const region = parseRegion(buffer, fileSize, path);
  if (buffer.length < REGION_SIZE) {
    throw new RegionError(
      'TRUNCATED',
      path,
      `${buffer.length} bytes, the header says ${REGION_SIZE}`,
    );
  }
  const processes: RegionProcess[] = [];
  const ipcImporters: RegionProcess[] = [];
  for (let slot = 0; slot < MAX_SLOTS; slot++) {
    const base = SLOTS_OFFSET + slot * SLOT_SIZE;
    const pid = buffer.readInt32LE(base + SLOT_FIELDS.pid.offset);
    if (pid <= 0) continue;
    const process = {
      pid,
      startTime: buffer.readBigUInt64LE(base + SLOT_FIELDS.start_time.offset),
      lastLaunchSeconds: buffer.readUInt32LE(base + SLOT_FIELDS.last_launch_s.offset),
    };
    processes.push(process);
    if (importerBit(buffer, slot)) ipcImporters.push(process);
  }
  return {
    ...region,
    processes,
    ipcImporters,
    ipcImportersUnlisted: buffer.readUInt32LE(HEADER_FIELDS.ipc_importers_unlisted.offset) !== 0,
  };
}

/** Slot `slot`'s bit in the header's ipc_importers (64-bit little-endian words). */
function importerBit(buffer: Buffer, slot: number): boolean {
  if (slot >= IPC_IMPORTER_SLOTS) return false;
  const word = buffer.readBigUInt64LE(
    HEADER_FIELDS.ipc_importers.offset + 8 * Math.floor(slot / 64),
  );
  return ((word >> BigInt(slot % 64)) & 1n) === 1n;
}

/** Parses the first READ_BYTES of a region file of `fileSize` bytes; throws RegionError. */
export function parseRegion(buffer: Buffer, fileSize: number, path: string): Region {
  const fail = (code: RegionErrorCode, detail: string): never => {
    throw new RegionError(code, path, detail);
  };
  if (buffer.length < HEADER_SIZE) {
    fail('TRUNCATED', `${buffer.length} bytes, shorter than the ${HEADER_SIZE}-byte header`);
  }
  const magic = buffer.readBigUInt64LE(HEADER_FIELDS.magic.offset);
  if (magic !== REGION_MAGIC) {
    fail(
      'BAD_MAGIC',
      `magic 0x${magic.toString(16)} is not 0x${REGION_MAGIC.toString(16)} ("GPUSHRD1"): not a GPU Shards region`,
    );
  }
  const version = buffer.readUInt32LE(HEADER_FIELDS.version.offset);
  if (version !== REGION_VERSION) {
    fail(
      'UNSUPPORTED_VERSION',
      `layout version ${version}, this agent reads version ${REGION_VERSION}`,
    );
  }
  const checksum = buffer.readBigUInt64LE(HEADER_FIELDS.checksum.offset);
  const computed = fnv1a64(buffer.subarray(0, CHECKSUM_BYTES));
  if (checksum !== computed) {
    fail(
      'CORRUPT',
      `header checksum 0x${checksum.toString(16)} does not match its fields (0x${computed.toString(16)})`,
    );
  }
  const expect = (field: keyof typeof HEADER_FIELDS, wanted: number): void => {
    const { offset, size } = HEADER_FIELDS[field];
    const value = size === 8 ? Number(buffer.readBigUInt64LE(offset)) : buffer.readUInt32LE(offset);
    if (value !== wanted)
      fail('CORRUPT', `${field} is ${value}, version ${REGION_VERSION} has ${wanted}`);
  };
  expect('header_size', HEADER_SIZE);
  expect('total_size', REGION_SIZE);
  expect('max_devices', MAX_DEVICES);
  expect('max_slots', MAX_SLOTS);
  expect('device_size', DEVICE_SIZE);
  expect('slot_size', SLOT_SIZE);
  expect('devices_offset', DEVICES_OFFSET);
  expect('slots_offset', SLOTS_OFFSET);
  if (fileSize < REGION_SIZE || buffer.length < READ_BYTES) {
    fail('TRUNCATED', `${fileSize} bytes, the header says ${REGION_SIZE}`);
  }
  const deviceCount = buffer.readUInt32LE(HEADER_FIELDS.device_count.offset);
  if (deviceCount > MAX_DEVICES)
    fail('CORRUPT', `device_count ${deviceCount} is past ${MAX_DEVICES}`);
  const devices: RegionDevice[] = [];
  for (let slot = 0; slot < deviceCount; slot++) {
    const base = DEVICES_OFFSET + slot * DEVICE_SIZE;
    if (buffer.readUInt32LE(base + DEVICE_FIELDS.state.offset) !== DEVICE_STATE_ACTIVE) continue;
    const counter = (
      field: 'limit_bytes' | 'used_bytes' | 'context_bytes' | 'peak_bytes' | 'total_bytes',
    ): number => {
      const value = buffer.readBigUInt64LE(base + DEVICE_FIELDS[field].offset);
      if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
        fail('CORRUPT', `device ${slot} ${field} ${value} is past 2^53`);
      }
      return Number(value);
    };
    devices.push({
      slot,
      uuid: formatUuid(
        buffer.subarray(
          base + DEVICE_FIELDS.uuid.offset,
          base + DEVICE_FIELDS.uuid.offset + DEVICE_FIELDS.uuid.size,
        ),
      ),
      limitBytes: counter('limit_bytes'),
      usedBytes: counter('used_bytes'),
      contextBytes: counter('context_bytes'),
      peakBytes: counter('peak_bytes'),
      totalBytes: counter('total_bytes'),
      lastLaunchNs: buffer.readBigUInt64LE(base + DEVICE_FIELDS.last_launch_ns.offset),
      pressureCount: buffer.readBigUInt64LE(base + DEVICE_FIELDS.pressure_count.offset),
      pressureNs: buffer.readBigUInt64LE(base + DEVICE_FIELDS.pressure_ns.offset),
    });
  }
  return {
    version,
    devices,
    wakeRequests: buffer.readBigUInt64LE(HEADER_FIELDS.wake_requests.offset),
    wakeRequestedNs: buffer.readBigUInt64LE(HEADER_FIELDS.wake_requested_ns.offset),
  };
}

/**
 * Sets the cap of one ACTIVE device, found by UUID, with one aligned 8-byte write (the
 * library reads the limit on every allocation). Returns false when the region has no
 * ACTIVE entry for that GPU yet (no process of the container has touched it).
 */
export async function writeRegionLimit(
  path: string,
  gpuUuid: string,
  limitBytes: number,
): Promise<boolean> {
  if (!Number.isSafeInteger(limitBytes) || limitBytes < 0) {
    throw new RangeError(`a region limit must be a whole number of bytes, got ${limitBytes}`);
  }
  const handle = await openRegion(path, constants.O_RDWR);
  try {
    const { size } = await handle.stat();
    const buffer = Buffer.alloc(READ_BYTES);
    const { bytesRead } = await handle.read(buffer, 0, READ_BYTES, 0);
    const region = parseRegion(buffer.subarray(0, bytesRead), size, path);
    const device = region.devices.find(
      (candidate) => candidate.uuid.toLowerCase() === gpuUuid.toLowerCase(),
    );
    if (device === undefined) return false;
    const value = Buffer.alloc(8);
    value.writeBigUInt64LE(BigInt(limitBytes));
    const offset = DEVICES_OFFSET + device.slot * DEVICE_SIZE + DEVICE_FIELDS.limit_bytes.offset;
    const { bytesWritten } = await handle.write(value, 0, 8, offset);
    if (bytesWritten !== 8)
      throw new RegionError('TRUNCATED', path, `wrote ${bytesWritten} of 8 bytes of a limit`);
    return true;
  } finally {
    await handle.close();
  }
}

async function readPrefix(
  path: string,
  length: number,
): Promise<{ buffer: Buffer; fileSize: number }> {
  const handle = await openRegion(path, constants.O_RDONLY);
  try {
    const { size } = await handle.stat();
    const buffer = Buffer.alloc(length);
    const { bytesRead } = await handle.read(buffer, 0, length, 0);
    return { buffer: buffer.subarray(0, bytesRead), fileSize: size };
  } finally {
    await handle.close();
  }
}

async function openRegion(path: string, mode: number): Promise<fs.FileHandle> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(path, mode | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT')
      throw new RegionError('MISSING', path, 'does not exist (no CUDA process has started yet)');
    if (code === 'ELOOP') throw new RegionError('NOT_A_FILE', path, 'is a symbolic link, refused');
    throw error;
  }
  const stat = await handle.stat();
  if (!stat.isFile()) {
    await handle.close();
    throw new RegionError('NOT_A_FILE', path, 'is not a regular file, refused');
  }
  return handle;
}

/** The region's checksum: FNV-1a, 64 bits. */
export function fnv1a64(bytes: Uint8Array): bigint {
  let hash = 0xcbf29ce484222325n;
  for (const byte of bytes) {
    hash ^= BigInt(byte);
    hash = (hash * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return hash;
}

/** Raw CUuuid bytes as NVML writes them: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx. */
export function formatUuid(bytes: Uint8Array): string {
  const hex = Buffer.from(bytes).toString('hex');
  return `GPU-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

/** The inverse of formatUuid, for tests and writers; throws on anything else. */
export function parseUuid(uuid: string): Buffer {
  const match =
    /^GPU-([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{12})$/i.exec(uuid);
  if (match === null)
    throw new RangeError(
      `not a GPU UUID of the form GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx: ${uuid}`,
    );
  return Buffer.from(match.slice(1).join(''), 'hex');
}

import { constants, promises as fs, writeSync } from 'node:fs';
import { dirname } from 'node:path';

import { fnv1a64, formatUuid, parseUuid } from '../regions/region-file.js';
import {
  LIMITS_CHECKSUM_BYTES,
  LIMITS_COMPUTE_TURNS_CPU,
  LIMITS_COMPUTE_TURNS_GPU,
  LIMITS_COMPUTE_TURNS_UNSET,
  LIMITS_DEVICES_OFFSET,
  LIMITS_DEVICE_FIELDS,
  LIMITS_DEVICE_SIZE,
  LIMITS_DEVICE_STATE_ACTIVE,
  LIMITS_HEADER_FIELDS,
  LIMITS_HEADER_SIZE,
  LIMITS_MAGIC,
  LIMITS_MAX_DEVICES,
  LIMITS_MEMORY_RESIDENT,
  LIMITS_MEMORY_SUSPENDED,
  LIMITS_SIZE,
  LIMITS_VERSION,
} from './limits-layout.js';

/** One GPU of a shard as its limits file holds it. */
export interface LimitsDevice {
  readonly uuid: string;
  /** The cap, context included; 0 = uncapped. */
  readonly limitBytes: number;
  readonly contextBytes: number;
  /** 0 = the interposer's default. */
  readonly poolGrowthBytes?: number;
  /** The shard's real usage on this GPU (NVML); 0 = unknown. */
  readonly realBytes?: number;
  readonly realSampledAtMs?: number;
  /** Compute share on this GPU, permille 1..1000; 0 or absent = unset (docs/compute.md). */
  readonly computeSharePermille?: number;
  readonly computeMode?: ComputeMode;
  /**
   * The MPS active-thread percentage (1..100) libvgpu.so forces at cuInit on a host with an MPS
   * partition; 0 or absent = none. Fixed for the life of the container: an MPS client cannot
   * change it, so it is written only with the whole file.
   */
  readonly mpsThreadPercent?: number;
}

/**
 * How libvgpu.so reads compute_mode: guaranteed (at least the share, work-conserving), capped
 * (never more), isolated (an MPS client in the host's partition for such shards: no turns).
 */
export type ComputeMode = 'guaranteed' | 'capped' | 'isolated';
export const COMPUTE_MODE_CODE: Record<ComputeMode, number> = {
  guaranteed: 1,
  capped: 2,
  isolated: 3,
};
const COMPUTE_MODE_BY_CODE = new Map(
  Object.entries(COMPUTE_MODE_CODE).map(([mode, code]) => [code, mode as ComputeMode]),
);

/**
 * Where libvgpu.so makes a shard wait for its compute turns: on the CPU, or on the GPU behind a
 * gate in the shard's streams (docs/compute.md, "Turns on the GPU"). The host's choice, written
 * into every shard's limits file: inside a shard libvgpu.so reads no compute setting from the
 * environment.
 */
export const COMPUTE_TURNS = ['cpu', 'gpu'] as const;
export type ComputeTurns = (typeof COMPUTE_TURNS)[number];
const COMPUTE_TURNS_CODE: Record<ComputeTurns, number> = {
  cpu: LIMITS_COMPUTE_TURNS_CPU,
  gpu: LIMITS_COMPUTE_TURNS_GPU,
};

function computeTurnsCode(turns: ComputeTurns | undefined): number {
  if (turns === undefined) return LIMITS_COMPUTE_TURNS_UNSET;
  if (!COMPUTE_TURNS.includes(turns)) {
    throw new RangeError(`compute turns are ${COMPUTE_TURNS.join(' or ')}, got ${String(turns)}`);
  }
  return COMPUTE_TURNS_CODE[turns];
}

function checkMpsPercent(value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > 100) {
    throw new RangeError(`an MPS thread percentage is 0..100, got ${value}`);
  }
  return value;
}

function checkShare(value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > 1000) {
    throw new RangeError(`a compute share is 0..1000 permille, got ${value}`);
  }
  return value;
}

export type LimitsField = 'limit_bytes' | 'context_bytes' | 'real_bytes' | 'real_sampled_at_ms';

function checkBytes(name: string, value: number): bigint {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${name} must be a whole number of bytes from 0 to 2^53, got ${value}`);
  }
  return BigInt(value);
}

/** What the header's shard_id holds: the ledger's member entries keep as many bytes. */
export const LIMITS_SHARD_ID_BYTES = LIMITS_HEADER_FIELDS.shard_id.size - 1;

/** Where a shard's GPU memory is, as its limits file tells libvgpu.so (memory_state). */
export type MemoryMark = 'resident' | 'suspended';
const MEMORY_MARK_CODE: Record<MemoryMark, number> = {
  resident: LIMITS_MEMORY_RESIDENT,
  suspended: LIMITS_MEMORY_SUSPENDED,
};

/** The most pressure_wait_ms the agent writes: libvgpu.so holds an allocation that long. */
export const MAX_PRESSURE_WAIT_MS = 60_000;

function checkPressureWait(value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > MAX_PRESSURE_WAIT_MS) {
    throw new RangeError(
      `a pressure wait is a whole number of milliseconds from 0 to ${MAX_PRESSURE_WAIT_MS}, got ${value}`,
    );
  }
  return value;
}

/** The header fields the agent chooses (the rest describe the layout). */
export interface LimitsHeader {
  /** The shard whose ledger entry libvgpu.so uses (a process cannot pick another). */
  readonly shardId?: string;
  /** Where it waits for its compute turns; absent: unset, CPU turns in a shard. */
  readonly computeTurns?: ComputeTurns;
  /** Absent: resident. */
  readonly memory?: MemoryMark;
  /** How long libvgpu.so retries an allocation refused under pressure; absent: 0, no retry. */
  readonly pressureWaitMs?: number;
}

/**
 * The whole file for these GPUs (in this order) with the header's chosen fields. Throws
 * RangeError on bad input.
 */
export function encodeLimits(devices: readonly LimitsDevice[], header: LimitsHeader = {}): Buffer {
  const shardId = header.shardId ?? '';
  const shardIdBytes = Buffer.from(shardId, 'utf8');
  if (shardIdBytes.length > LIMITS_SHARD_ID_BYTES || shardIdBytes.includes(0)) {
    throw new RangeError(
      `a limits file names a shard id of at most ${LIMITS_SHARD_ID_BYTES} bytes without NUL, got "${shardId}"`,
    );
  }
  if (devices.length > LIMITS_MAX_DEVICES) {
    throw new RangeError(
      `a limits file holds at most ${LIMITS_MAX_DEVICES} GPUs, got ${devices.length}`,
    );
  }
  const pressureWaitMs = checkPressureWait(header.pressureWaitMs ?? 0);
  const turns = computeTurnsCode(header.computeTurns);
  const seen = new Set<string>();
  const buffer = Buffer.alloc(LIMITS_SIZE);
  buffer.writeBigUInt64LE(LIMITS_MAGIC, LIMITS_HEADER_FIELDS.magic.offset);
  buffer.writeUInt32LE(LIMITS_VERSION, LIMITS_HEADER_FIELDS.version.offset);
  buffer.writeUInt32LE(LIMITS_HEADER_SIZE, LIMITS_HEADER_FIELDS.header_size.offset);
  buffer.writeBigUInt64LE(BigInt(LIMITS_SIZE), LIMITS_HEADER_FIELDS.total_size.offset);
  buffer.writeUInt32LE(LIMITS_MAX_DEVICES, LIMITS_HEADER_FIELDS.max_devices.offset);
  buffer.writeUInt32LE(LIMITS_DEVICE_SIZE, LIMITS_HEADER_FIELDS.device_size.offset);
  buffer.writeUInt32LE(devices.length, LIMITS_HEADER_FIELDS.device_count.offset);
  buffer.writeBigUInt64LE(
    fnv1a64(buffer.subarray(0, LIMITS_CHECKSUM_BYTES)),
    LIMITS_HEADER_FIELDS.checksum.offset,
  );
  shardIdBytes.copy(buffer, LIMITS_HEADER_FIELDS.shard_id.offset);
  buffer.writeUInt32LE(turns, LIMITS_HEADER_FIELDS.compute_turns.offset);
  buffer.writeUInt32LE(
    MEMORY_MARK_CODE[header.memory ?? 'resident'],
    LIMITS_HEADER_FIELDS.memory_state.offset,
  );
  buffer.writeUInt32LE(pressureWaitMs, LIMITS_HEADER_FIELDS.pressure_wait_ms.offset);
  devices.forEach((device, index) => {
    const uuid = parseUuid(device.uuid);
    const key = uuid.toString('hex');
    if (seen.has(key)) throw new RangeError(`GPU ${device.uuid} is listed twice`);
    seen.add(key);
    const base = LIMITS_DEVICES_OFFSET + index * LIMITS_DEVICE_SIZE;
    uuid.copy(buffer, base + LIMITS_DEVICE_FIELDS.uuid.offset);
    buffer.writeUInt32LE(LIMITS_DEVICE_STATE_ACTIVE, base + LIMITS_DEVICE_FIELDS.state.offset);
    const put = (field: keyof typeof LIMITS_DEVICE_FIELDS, name: string, value: number) =>
      buffer.writeBigUInt64LE(checkBytes(name, value), base + LIMITS_DEVICE_FIELDS[field].offset);
    put('limit_bytes', 'limitBytes', device.limitBytes);
    put('context_bytes', 'contextBytes', device.contextBytes);
    put('pool_growth_bytes', 'poolGrowthBytes', device.poolGrowthBytes ?? 0);
    put('real_bytes', 'realBytes', device.realBytes ?? 0);
    put('real_sampled_at_ms', 'realSampledAtMs', device.realSampledAtMs ?? 0);
    buffer.writeUInt32LE(
      checkShare(device.computeSharePermille ?? 0),
      base + LIMITS_DEVICE_FIELDS.compute_share_permille.offset,
    );
    buffer.writeUInt32LE(
      device.computeMode ? COMPUTE_MODE_CODE[device.computeMode] : 0,
      base + LIMITS_DEVICE_FIELDS.compute_mode.offset,
    );
    buffer.writeUInt32LE(
      checkMpsPercent(device.mpsThreadPercent ?? 0),
      base + LIMITS_DEVICE_FIELDS.mps_thread_percent.offset,
    );
  });
  return buffer;
}

export class LimitsFileError extends Error {
  override name = 'LimitsFileError';
}

/** Reads a limits file back (tests, operators); throws LimitsFileError on anything else. */
export function decodeLimits(buffer: Buffer): LimitsDevice[] {
  const fail = (detail: string): never => {
    throw new LimitsFileError(`not a limits file: ${detail}`);
  };
  if (buffer.length < LIMITS_SIZE) fail(`${buffer.length} bytes, want ${LIMITS_SIZE}`);
  if (buffer.readBigUInt64LE(0) !== LIMITS_MAGIC) fail('bad magic');
  if (buffer.readUInt32LE(LIMITS_HEADER_FIELDS.version.offset) !== LIMITS_VERSION)
    fail('unsupported version');
  const checksum = buffer.readBigUInt64LE(LIMITS_HEADER_FIELDS.checksum.offset);
  if (checksum !== fnv1a64(buffer.subarray(0, LIMITS_CHECKSUM_BYTES))) fail('bad checksum');
  const count = buffer.readUInt32LE(LIMITS_HEADER_FIELDS.device_count.offset);
  if (count > LIMITS_MAX_DEVICES) fail(`device_count ${count}`);
  const devices: LimitsDevice[] = [];
  for (let index = 0; index < count; index++) {
    const base = LIMITS_DEVICES_OFFSET + index * LIMITS_DEVICE_SIZE;
    if (buffer.readUInt32LE(base + LIMITS_DEVICE_FIELDS.state.offset) !== 1) continue;
    const get = (field: keyof typeof LIMITS_DEVICE_FIELDS) =>
      Number(buffer.readBigUInt64LE(base + LIMITS_DEVICE_FIELDS[field].offset));
    const share = buffer.readUInt32LE(base + LIMITS_DEVICE_FIELDS.compute_share_permille.offset);
    const mode = buffer.readUInt32LE(base + LIMITS_DEVICE_FIELDS.compute_mode.offset);
    const mps = buffer.readUInt32LE(base + LIMITS_DEVICE_FIELDS.mps_thread_percent.offset);
    devices.push({
      uuid: formatUuid(buffer.subarray(base, base + 16)),
      limitBytes: get('limit_bytes'),
      contextBytes: get('context_bytes'),
      poolGrowthBytes: get('pool_growth_bytes'),
      realBytes: get('real_bytes'),
      realSampledAtMs: get('real_sampled_at_ms'),
      ...(share !== 0 ? { computeSharePermille: share } : {}),
      // Any other code reads as guaranteed, the default.
      ...(mode !== 0 ? { computeMode: COMPUTE_MODE_BY_CODE.get(mode) ?? 'guaranteed' } : {}),
      ...(mps !== 0 ? { mpsThreadPercent: mps } : {}),
    });
  }
  return devices;
}

/**
 * Writes the whole file where no container sees it half-written: a temporary file in the
 * same folder, mode 0644, then rename. Only before the container starts: a container's file
 * bind follows the inode it was started with, so later changes go through updateLimits.
 */
export async function writeLimitsFile(
  path: string,
  devices: readonly LimitsDevice[],
  header: LimitsHeader = {},
): Promise<void> {
  const bytes = encodeLimits(devices, header);
  const temporary = `${path}.${process.pid}.tmp`;
  await fs.mkdir(dirname(path), { recursive: true, mode: 0o755 });
  try {
    const handle = await fs.open(
      temporary,
      constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW,
      0o644,
    );
    try {
      await handle.writeFile(bytes);
      await handle.chmod(0o644);
    } finally {
      await handle.close();
    }
    await fs.rename(temporary, path);
  } catch (error) {
    await fs.rm(temporary, { force: true });
    throw error;
  }
}

/** An open limits file the agent updates in place: aligned 8-byte writes, one per field. */
export class LimitsFile {
  private readonly value = Buffer.alloc(8);

  private constructor(
    readonly path: string,
    private readonly handle: fs.FileHandle,
    /** GPU UUID (lowercase) → device index in the file. */
    private readonly index: ReadonlyMap<string, number>,
  ) {}

  static async open(path: string): Promise<LimitsFile> {
    const handle = await fs.open(path, constants.O_RDWR | constants.O_NOFOLLOW);
    try {
      const buffer = Buffer.alloc(LIMITS_SIZE);
      await handle.read(buffer, 0, LIMITS_SIZE, 0);
      const devices = decodeLimits(buffer);
      return new LimitsFile(
        path,
        handle,
        new Map(devices.map((device, i) => [device.uuid.toLowerCase(), i])),
      );
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  has(gpuUuid: string): boolean {
    return this.index.has(gpuUuid.toLowerCase());
  }

  /** Sets one field of one GPU; false when the file has no such GPU. */
  async set(gpuUuid: string, field: LimitsField, value: number): Promise<boolean> {
    const index = this.index.get(gpuUuid.toLowerCase());
    if (index === undefined) return false;
    this.value.writeBigUInt64LE(checkBytes(field, value));
    const offset =
      LIMITS_DEVICES_OFFSET + index * LIMITS_DEVICE_SIZE + LIMITS_DEVICE_FIELDS[field].offset;
    const { bytesWritten } = await this.handle.write(this.value, 0, 8, offset);
    if (bytesWritten !== 8)
      throw new LimitsFileError(`${this.path}: wrote ${bytesWritten} of 8 bytes`);
    return true;
  }

  /**
   * Sets a GPU's compute share and mode in place with one aligned 8-byte write (share at 64,
   * mode at 68), so libvgpu.so never sees one without the other; it takes effect at the
   * shard's next turn. False when the file has no such GPU; RangeError on a bad share.
   * mps_thread_percent (offset 72) is left as it is: a running MPS client cannot change it.
   */
  async setCompute(gpuUuid: string, sharePermille: number, mode: ComputeMode): Promise<boolean> {
    const index = this.index.get(gpuUuid.toLowerCase());
    if (index === undefined) return false;
    const word = Buffer.alloc(8);
    word.writeUInt32LE(checkShare(sharePermille), 0);
    word.writeUInt32LE(COMPUTE_MODE_CODE[mode], 4);
    const offset =
      LIMITS_DEVICES_OFFSET +
      index * LIMITS_DEVICE_SIZE +
      LIMITS_DEVICE_FIELDS.compute_share_permille.offset;
    const { bytesWritten } = await this.handle.write(word, 0, 8, offset);
    if (bytesWritten !== 8)
      throw new LimitsFileError(`${this.path}: wrote ${bytesWritten} of 8 bytes`);
    return true;
  }

  /**
   * set() without the event loop: one pwrite(2), for the sampler's few writes every interval
   * (an async write costs more CPU than the write itself). Throws where set() rejects.
   */
  setSync(gpuUuid: string, field: LimitsField, value: number): boolean {
    const index = this.index.get(gpuUuid.toLowerCase());
    if (index === undefined) return false;
    this.value.writeBigUInt64LE(checkBytes(field, value));
    const offset =
      LIMITS_DEVICES_OFFSET + index * LIMITS_DEVICE_SIZE + LIMITS_DEVICE_FIELDS[field].offset;
    const written = writeSync(this.handle.fd, this.value, 0, 8, offset);
    if (written !== 8) throw new LimitsFileError(`${this.path}: wrote ${written} of 8 bytes`);
    return true;
  }

  /**
   * Marks where the shard's GPU memory is (memory_state): one aligned 4-byte write, which
   * libvgpu.so reads on every hooked call.
   */
  async setMemory(memory: MemoryMark): Promise<void> {
    await this.writeHeaderWord('memory_state', MEMORY_MARK_CODE[memory]);
  }

  /** What memory_state says; any value but suspended's reads as resident, as libvgpu.so does. */
  async memory(): Promise<MemoryMark> {
    const word = Buffer.alloc(4);
    const { offset } = LIMITS_HEADER_FIELDS.memory_state;
    const { bytesRead } = await this.handle.read(word, 0, 4, offset);
    if (bytesRead !== 4) throw new LimitsFileError(`${this.path}: read ${bytesRead} of 4 bytes`);
    return word.readUInt32LE(0) === LIMITS_MEMORY_SUSPENDED ? 'suspended' : 'resident';
  }

  /** Sets pressure_wait_ms (RangeError past MAX_PRESSURE_WAIT_MS). */
  async setPressureWait(ms: number): Promise<void> {
    await this.writeHeaderWord('pressure_wait_ms', checkPressureWait(ms));
  }

  private async writeHeaderWord(
    field: 'memory_state' | 'pressure_wait_ms',
    value: number,
  ): Promise<void> {
    const word = Buffer.alloc(4);
    word.writeUInt32LE(value, 0);
    const { bytesWritten } = await this.handle.write(
      word,
      0,
      4,
      LIMITS_HEADER_FIELDS[field].offset,
    );
    if (bytesWritten !== 4)
      throw new LimitsFileError(`${this.path}: wrote ${bytesWritten} of 4 bytes`);
  }

  async read(): Promise<LimitsDevice[]> {
    const buffer = Buffer.alloc(LIMITS_SIZE);
    await this.handle.read(buffer, 0, LIMITS_SIZE, 0);
    return decodeLimits(buffer);
  }

  close(): Promise<void> {
    return this.handle.close();
  }
}

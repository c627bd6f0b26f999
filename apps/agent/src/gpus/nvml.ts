import * as koffi from 'koffi';

import { errorMessage } from '@gpushards/protocol';

import {
  decodeProcessUtilization,
  PROCESS_UTILIZATION_SAMPLE_SIZE,
  type NvmlProcessUtilization,
} from './process-utilization.js';

/**
 * The few NVML calls the agent needs, through koffi (no native addon to build). The same
 * code loads NVIDIA's libnvidia-ml.so.1 on a GPU host and native/fakes' libnvidia-ml.so.1
 * in tests. Every return code is checked; failures carry nvmlErrorString's text.
 */

const NVML_SUCCESS = 0;
const NVML_ERROR_NOT_SUPPORTED = 3;
/** nvmlDeviceGetProcessUtilization: no process ran since lastSeenTimeStamp (not an error). */
const NVML_ERROR_NOT_FOUND = 6;
const UUID_BUFFER = 96; // NVML_DEVICE_UUID_V2_BUFFER_SIZE
const NAME_BUFFER = 96; // NVML_DEVICE_NAME_V2_BUFFER_SIZE
const VERSION_BUFFER = 80; // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
const NVML_ERROR_INSUFFICIENT_SIZE = 7;
/** nvmlProcessInfo_t (v2, what the _v3 list calls fill): pid u32, pad, usedGpuMemory u64, two u32. */
const PROCESS_INFO_SIZE = 24;
/** usedGpuMemory when the driver cannot say (e.g. Windows WDDM); never on Linux in practice. */
const NVML_VALUE_NOT_AVAILABLE = 0xffffffffffffffffn;

// koffi types are process-wide; declare them once, unnamed.
const memoryType = koffi.struct({
  total: 'unsigned long long',
  free: 'unsigned long long',
  used: 'unsigned long long',
});
/** nvmlMemory_v2_t: the v1 fields with the driver's and firmware's reserve apart. */
const memoryV2Type = koffi.struct({
  version: 'unsigned int',
  total: 'unsigned long long',
  reserved: 'unsigned long long',
  free: 'unsigned long long',
  used: 'unsigned long long',
});
/** NVML_STRUCT_VERSION(Memory, 2): the struct's size | 2 << 24. */
const NVML_MEMORY_V2 = (koffi.sizeof(memoryV2Type) | (2 << 24)) >>> 0;
const utilizationType = koffi.struct({ gpu: 'unsigned int', memory: 'unsigned int' });

export interface NvmlDevice {
  readonly index: number;
  readonly uuid: string;
  readonly name: string;
  readonly totalBytes: number;
  /**
   * What the driver and firmware set aside (nvmlDeviceGetMemoryInfo_v2's reserved; 0 where
   * the library has no v2): never free, never allocatable (480 MiB on an H100 80GB, driver
   * 580), though v1 counts it as used.
   */
  readonly reservedBytes: number;
}

export interface NvmlMemory {
  readonly totalBytes: number;
  readonly usedBytes: number;
  readonly freeBytes: number;
}

/** One process with memory on a GPU, as the driver sees it (host PID namespace). */
export interface NvmlProcess {
  readonly pid: number;
  readonly usedBytes: number;
}

export class NvmlError extends Error {
  override name = 'NvmlError';

  constructor(
    readonly call: string,
    readonly code: number,
    description: string,
  ) {
    super(`${call} failed: ${description} (NVML error ${code})`);
  }
}

/** The library could not be loaded at all: no driver on this host, or a wrong path. */
export class NvmlUnavailableError extends Error {
  override name = 'NvmlUnavailableError';
}

type Fn = (...args: unknown[]) => unknown;
type TypeSpec = Parameters<typeof koffi.type>[0];

export class Nvml {
  private readonly handles: bigint[] = [];
  /** Reused by processes(): sampling allocates nothing while the list fits. */
  private processBuffer = Buffer.alloc(PROCESS_INFO_SIZE * 64);
  private readonly processCount = [0];
  /** Reused by processUtilization(), grown as needed. */
  private utilizationBuffer = Buffer.alloc(PROCESS_UTILIZATION_SAMPLE_SIZE * 16);
  private readonly utilizationCount = [0];

  private constructor(
    readonly libraryPath: string,
    private readonly fns: Record<string, Fn>,
  ) {}

  /** Whether the library lists processes per GPU (every driver since 2021; the fakes too). */
  get listsProcesses(): boolean {
    return this.fns.computeProcesses !== undefined;
  }

  /** Loads the library and runs nvmlInit_v2; throws NvmlUnavailableError or NvmlError. */
  static open(libraryPath: string): Nvml {
    let library: koffi.LibraryHandle;
    try {
      library = koffi.load(libraryPath);
    } catch (error) {
      throw new NvmlUnavailableError(
        `cannot load the NVIDIA management library ${libraryPath}: ${errorMessage(error)}. ` +
          'Install the NVIDIA driver, point GPUSHARDS_NVML_LIBRARY at libnvidia-ml.so.1, ' +
          'or set GPUSHARDS_SIMULATE_GPUS (e.g. "2x24g") to run with simulated GPUs.',
        { cause: error },
      );
    }
    const declare = (name: string, result: TypeSpec, args: TypeSpec[]): Fn => {
      try {
        return library.func(name, result, args) as Fn;
      } catch (error) {
        throw new NvmlUnavailableError(
          `${libraryPath} has no ${name}: ${errorMessage(error)} (driver too old, or not NVML)`,
          { cause: error },
        );
      }
    };
    const optional = (name: string, result: TypeSpec, args: TypeSpec[]): Fn | undefined => {
      try {
        return library.func(name, result, args) as Fn;
      } catch {
        return undefined;
      }
    };
    const processList: TypeSpec[] = ['void *', koffi.inout('unsigned int *'), 'void *'];
    const computeProcesses = optional(
      'nvmlDeviceGetComputeRunningProcesses_v3',
      'int',
      processList,
    );
    const graphicsProcesses = optional(
      'nvmlDeviceGetGraphicsRunningProcesses_v3',
      'int',
      processList,
    );
    // (nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned int *, unsigned long long)
    const processUtilization = optional('nvmlDeviceGetProcessUtilization', 'int', [
      'void *',
      'void *',
      koffi.inout('unsigned int *'),
      'unsigned long long',
    ]);
    const memoryV2 = optional('nvmlDeviceGetMemoryInfo_v2', 'int', [
      'void *',
      koffi.inout(koffi.pointer(memoryV2Type)),
    ]);
    const fns: Record<string, Fn> = {
      ...(memoryV2 ? { memoryV2 } : {}),
      ...(computeProcesses ? { computeProcesses } : {}),
      ...(processUtilization ? { processUtilization } : {}),
      ...(graphicsProcesses ? { graphicsProcesses } : {}),
      init: declare('nvmlInit_v2', 'int', []),
      shutdown: declare('nvmlShutdown', 'int', []),
      errorString: declare('nvmlErrorString', 'const char *', ['int']),
      driverVersion: declare('nvmlSystemGetDriverVersion', 'int', ['char *', 'unsigned int']),
      cudaVersion: declare('nvmlSystemGetCudaDriverVersion', 'int', [koffi.out('int *')]),
      count: declare('nvmlDeviceGetCount_v2', 'int', [koffi.out('unsigned int *')]),
      handle: declare('nvmlDeviceGetHandleByIndex_v2', 'int', [
        'unsigned int',
        koffi.out('void **'),
      ]),
      uuid: declare('nvmlDeviceGetUUID', 'int', ['void *', 'char *', 'unsigned int']),
      name: declare('nvmlDeviceGetName', 'int', ['void *', 'char *', 'unsigned int']),
      memory: declare('nvmlDeviceGetMemoryInfo', 'int', [
        'void *',
        koffi.out(koffi.pointer(memoryType)),
      ]),
      utilization: declare('nvmlDeviceGetUtilizationRates', 'int', [
        'void *',
        koffi.out(koffi.pointer(utilizationType)),
      ]),
    };
    const nvml = new Nvml(libraryPath, fns);
    nvml.check('nvmlInit_v2', fns.init!());
    return nvml;
  }

  driverVersion(): string {
    return this.readString('nvmlSystemGetDriverVersion', VERSION_BUFFER, (buffer) =>
      this.call('driverVersion', buffer, VERSION_BUFFER),
    );
  }

  /** "12.4" from NVML's 12040. */
  cudaVersion(): string {
    const out = [0];
    this.check('nvmlSystemGetCudaDriverVersion', this.call('cudaVersion', out));
    const version = out[0] ?? 0;
    return `${Math.floor(version / 1000)}.${Math.floor((version % 1000) / 10)}`;
  }

  deviceCount(): number {
    const out = [0];
    this.check('nvmlDeviceGetCount_v2', this.call('count', out));
    return out[0] ?? 0;
  }

  device(index: number): NvmlDevice {
    const handle = this.handle(index);
    const uuid = this.readString('nvmlDeviceGetUUID', UUID_BUFFER, (buffer) =>
      this.call('uuid', handle, buffer, UUID_BUFFER),
    );
    const name = this.readString('nvmlDeviceGetName', NAME_BUFFER, (buffer) =>
      this.call('name', handle, buffer, NAME_BUFFER),
    );
    return {
      index,
      uuid,
      name,
      totalBytes: this.memory(index).totalBytes,
      reservedBytes: this.reservedBytes(handle),
    };
  }

  private reservedBytes(handle: bigint): number {
    if (this.fns.memoryV2 === undefined) return 0;
    const out: Record<string, unknown> = { version: NVML_MEMORY_V2 };
    this.check('nvmlDeviceGetMemoryInfo_v2', this.call('memoryV2', handle, out));
    return toNumber(out.reserved);
  }

  memory(index: number): NvmlMemory {
    const out: Record<string, unknown> = {};
    this.check('nvmlDeviceGetMemoryInfo', this.call('memory', this.handle(index), out));
    return {
      totalBytes: toNumber(out.total),
      usedBytes: toNumber(out.used),
      freeBytes: toNumber(out.free),
    };
  }

  /** Percent of time a kernel ran over the last sample period; undefined where not supported. */
  utilizationPercent(index: number): number | undefined {
    const out: Record<string, unknown> = {};
    const code = this.call('utilization', this.handle(index), out) as number;
    if (code === NVML_ERROR_NOT_SUPPORTED) return undefined;
    this.check('nvmlDeviceGetUtilizationRates', code);
    return Math.min(100, Math.max(0, toNumber(out.gpu)));
  }

  /**
   * Every process holding memory on the GPU, compute and graphics, with its bytes (a process
   * in both lists counts once, at its larger number). PIDs are the driver's: the host's PID
   * namespace, whatever namespace the process runs in.
   */
  processes(index: number): NvmlProcess[] {
    const handle = this.handle(index);
    const byPid = new Map<number, number>();
    for (const [name, call] of [
      ['computeProcesses', 'nvmlDeviceGetComputeRunningProcesses_v3'],
      ['graphicsProcesses', 'nvmlDeviceGetGraphicsRunningProcesses_v3'],
    ] as const) {
      if (this.fns[name] === undefined) continue;
      const count = this.readProcesses(name, call, handle);
      for (let i = 0; i < count; i++) {
        const base = i * PROCESS_INFO_SIZE;
        const pid = this.processBuffer.readUInt32LE(base);
        const used = this.processBuffer.readBigUInt64LE(base + 8);
        if (used === NVML_VALUE_NOT_AVAILABLE) continue;
        const bytes = toNumber(used);
        byPid.set(pid, Math.max(byPid.get(pid) ?? 0, bytes));
      }
    }
    return [...byPid].map(([pid, usedBytes]) => ({ pid, usedBytes }));
  }

  /**
   * Each process's utilization samples on the GPU newer than `lastSeenUs` (microseconds since
   * the Unix epoch; 0: whatever the driver keeps), through nvmlDeviceGetProcessUtilization:
   * asked first with no buffer for the count, then filled. [] when no process ran since
   * (NVML_ERROR_NOT_FOUND); undefined where the library or the GPU does not tell.
   */
  processUtilization(index: number, lastSeenUs: number): NvmlProcessUtilization[] | undefined {
    if (this.fns.processUtilization === undefined) return undefined;
    const call = 'nvmlDeviceGetProcessUtilization';
    const handle = this.handle(index);
    for (;;) {
      this.utilizationCount[0] = 0;
      let code = this.call('processUtilization', handle, null, this.utilizationCount, lastSeenUs);
      if (code === NVML_ERROR_NOT_FOUND) return [];
      if (code === NVML_ERROR_NOT_SUPPORTED) return undefined;
      // The count comes with NVML_ERROR_INSUFFICIENT_SIZE (some drivers: success).
      if (code !== NVML_ERROR_INSUFFICIENT_SIZE) this.check(call, code);
      if ((this.utilizationCount[0] ?? 0) === 0) return [];
      const wanted = this.utilizationCount[0] ?? 0;
      if (wanted * PROCESS_UTILIZATION_SAMPLE_SIZE > this.utilizationBuffer.length) {
        this.utilizationBuffer = Buffer.alloc(PROCESS_UTILIZATION_SAMPLE_SIZE * (wanted + 16));
      }
      const capacity = Math.floor(this.utilizationBuffer.length / PROCESS_UTILIZATION_SAMPLE_SIZE);
      this.utilizationCount[0] = capacity;
      code = this.call(
        'processUtilization',
        handle,
        this.utilizationBuffer,
        this.utilizationCount,
        lastSeenUs,
      );
      if (code === NVML_ERROR_INSUFFICIENT_SIZE) continue; // more processes since the count
      if (code === NVML_ERROR_NOT_FOUND) return [];
      if (code === NVML_ERROR_NOT_SUPPORTED) return undefined;
      this.check(call, code);
      const count = Math.min(this.utilizationCount[0] ?? 0, capacity);
      return decodeProcessUtilization(this.utilizationBuffer, count);
    }
  }

  close(): void {
    this.check('nvmlShutdown', this.call('shutdown'));
  }

  /** Fills processBuffer, growing it while the driver says it is too small; returns the count. */
  private readProcesses(name: string, call: string, handle: bigint): number {
    for (;;) {
      const capacity = Math.floor(this.processBuffer.length / PROCESS_INFO_SIZE);
      this.processCount[0] = capacity;
      const code = this.call(name, handle, this.processCount, this.processBuffer) as number;
      const count = this.processCount[0] ?? 0;
      if (code === NVML_ERROR_INSUFFICIENT_SIZE && count > capacity) {
        // Processes come and go between calls: leave room for a few more.
        this.processBuffer = Buffer.alloc(PROCESS_INFO_SIZE * (count + 16));
        continue;
      }
      this.check(call, code);
      return Math.min(count, capacity);
    }
  }

  private handle(index: number): bigint {
    const cached = this.handles[index];
    if (cached !== undefined) return cached;
    const out: unknown[] = [null];
    this.check('nvmlDeviceGetHandleByIndex_v2', this.call('handle', index, out));
    const handle = out[0];
    if (typeof handle !== 'bigint' || handle === 0n) {
      throw new NvmlError(
        'nvmlDeviceGetHandleByIndex_v2',
        -1,
        `returned no handle for GPU ${index}`,
      );
    }
    this.handles[index] = handle;
    return handle;
  }

  private call(name: string, ...args: unknown[]): unknown {
    return this.fns[name]!(...args);
  }

  private readString(call: string, size: number, fill: (buffer: Buffer) => unknown): string {
    const buffer = Buffer.alloc(size);
    this.check(call, fill(buffer));
    const end = buffer.indexOf(0);
    return buffer.subarray(0, end === -1 ? size : end).toString('utf8');
  }

  private check(call: string, code: unknown): void {
    if (code === NVML_SUCCESS) return;
    const number = typeof code === 'number' ? code : -1;
    let description: string;
    try {
      description = String(this.fns.errorString!(number) ?? 'unknown error');
    } catch {
      description = 'unknown error';
    }
    throw new NvmlError(call, number, description);
  }
}

/** koffi gives 64-bit integers as numbers when they fit, BigInt otherwise. */
export function toNumber(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'bigint' && value <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(value);
  throw new RangeError(`not a byte count below 2^53: ${String(value)}`);
}

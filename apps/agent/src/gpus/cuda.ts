import * as koffi from 'koffi';

import { errorMessage } from '@gpushards/protocol';
import { formatUuid } from '../regions/region-file.js';

/**
 * Just enough of the CUDA driver API to measure what one context costs: retain a GPU's
 * primary context, read NVML's used memory before and after, release it. On a GPU host this
 * is NVIDIA's libcuda.so.1; in tests native/fakes' libcuda.so.1, which charges a fixed size.
 */

const CUDA_SUCCESS = 0;

type Fn = (...args: unknown[]) => unknown;
type TypeSpec = Parameters<typeof koffi.type>[0];

export class CudaError extends Error {
  override name = 'CudaError';
}

export class CudaDriver {
  private constructor(
    readonly libraryPath: string,
    private readonly fns: Record<string, Fn>,
  ) {}

  static open(libraryPath: string): CudaDriver {
    let library: koffi.LibraryHandle;
    try {
      library = koffi.load(libraryPath);
    } catch (error) {
      throw new CudaError(
        `cannot load the CUDA driver library ${libraryPath}: ${errorMessage(error)} ` +
          '(set GPUSHARDS_CUDA_LIBRARY, or GPUSHARDS_CONTEXT_OVERHEAD to skip measuring)',
        { cause: error },
      );
    }
    const declare = (name: string, result: TypeSpec, args: TypeSpec[]): Fn => {
      try {
        return library.func(name, result, args) as Fn;
      } catch (error) {
        throw new CudaError(`${libraryPath} has no ${name}: ${errorMessage(error)}`, {
          cause: error,
        });
      }
    };
    const driver = new CudaDriver(libraryPath, {
      init: declare('cuInit', 'int', ['unsigned int']),
      errorString: declare('cuGetErrorString', 'int', ['int', koffi.out('const char **')]),
      count: declare('cuDeviceGetCount', 'int', [koffi.out('int *')]),
      device: declare('cuDeviceGet', 'int', [koffi.out('int *'), 'int']),
      uuid: declare('cuDeviceGetUuid', 'int', ['uint8_t *', 'int']),
      retain: declare('cuDevicePrimaryCtxRetain', 'int', [koffi.out('void **'), 'int']),
      setCurrent: declare('cuCtxSetCurrent', 'int', ['void *']),
      release: declare('cuDevicePrimaryCtxRelease_v2', 'int', ['int']),
    });
    driver.check('cuInit', driver.fns.init!(0));
    return driver;
  }

  /** UUID (lowercase, as NVML writes it) → CUDA ordinal, to match a GPU across the two APIs. */
  deviceUuids(): Map<string, number> {
    const count = [0];
    this.check('cuDeviceGetCount', this.fns.count!(count));
    const uuids = new Map<string, number>();
    for (let ordinal = 0; ordinal < (count[0] ?? 0); ordinal++) {
      const device = this.device(ordinal);
      const bytes = Buffer.alloc(16);
      this.check('cuDeviceGetUuid', this.fns.uuid!(bytes, device));
      uuids.set(formatUuid(bytes).toLowerCase(), ordinal);
    }
    return uuids;
  }

  /**
   * Creates the primary context of one GPU, calls `measure` while it exists, and releases it.
   */
  withPrimaryContext<T>(ordinal: number, measure: () => T): T {
    const device = this.device(ordinal);
    const context: unknown[] = [null];
    this.check('cuDevicePrimaryCtxRetain', this.fns.retain!(context, device));
    try {
      this.check('cuCtxSetCurrent', this.fns.setCurrent!(context[0]));
      return measure();
    } finally {
      this.fns.setCurrent!(null);
      this.check('cuDevicePrimaryCtxRelease_v2', this.fns.release!(device));
    }
  }

  private device(ordinal: number): number {
    const device = [0];
    this.check('cuDeviceGet', this.fns.device!(device, ordinal));
    return device[0] ?? 0;
  }

  private check(call: string, code: unknown): void {
    if (code === CUDA_SUCCESS) return;
    const text: unknown[] = [null];
    let description = 'unknown error';
    try {
      if (this.fns.errorString!(code, text) === CUDA_SUCCESS && typeof text[0] === 'string') {
        description = text[0];
      }
    } catch {
      // keep "unknown error"
    }
    throw new CudaError(`${call} failed: ${description} (CUDA error ${String(code)})`);
  }
}

import * as koffi from 'koffi';

import type { ProcessCheckpointState } from '@gpushards/limits';
import { errorMessage } from '@gpushards/protocol';

/**
 * The driver's checkpoint API (libcuda ≥ 570, docs/elastic.md "The mechanism") through koffi:
 * cuCheckpointProcessGetState, Lock, Checkpoint, Restore and Unlock, each called with the
 * target's host PID. A checkpoint or restore moves the process's whole GPU memory and takes
 * seconds (13 s for 25 GiB on an H200), so every call runs on koffi's worker threads (its
 * `.async`), never on the event loop. Those threads are libuv's pool, which the agent's file
 * reads share (4 threads unless UV_THREADPOOL_SIZE says otherwise): at most MOVE_CALL_SLOTS
 * moving calls run at once, the rest wait their turn here, so file I/O always has threads left.
 */

/** What the agent does with the checkpoint API; tests of the executor put a stand-in here. */
export interface CheckpointApi {
  readonly libraryPath: string;
  /** The process's state, or undefined when the driver does not know it (no CUDA in it, gone). */
  state(pid: number): Promise<ProcessCheckpointState | undefined>;
  /** Locks it, waiting at most `timeoutMs` for its CUDA calls to let go (0: no limit). */
  lock(pid: number, timeoutMs: number): Promise<void>;
  checkpoint(pid: number): Promise<void>;
  restore(pid: number): Promise<void>;
  unlock(pid: number): Promise<void>;
}

export type CheckpointCall = 'lock' | 'checkpoint' | 'restore' | 'unlock';

const CALL_SYMBOLS: Record<CheckpointCall | 'state', string> = {
  state: 'cuCheckpointProcessGetState',
  lock: 'cuCheckpointProcessLock',
  checkpoint: 'cuCheckpointProcessCheckpoint',
  restore: 'cuCheckpointProcessRestore',
  unlock: 'cuCheckpointProcessUnlock',
};

/** A checkpoint call the driver refused: its CUresult, name and what it means here. */
export class CheckpointCallError extends Error {
  override name = 'CheckpointCallError';

  constructor(
    readonly call: CheckpointCall,
    readonly pid: number,
    readonly code: number,
    readonly errorName: string,
    description: string,
  ) {
    super(
      `${CALL_SYMBOLS[call]}(pid ${pid}) returned ${errorName} (${description}): ${meaningOf(call, errorName)}`,
    );
  }
}

/** The driver has no checkpoint API (or none could be loaded): suspends are unavailable. */
export class CheckpointUnavailableError extends Error {
  override name = 'CheckpointUnavailableError';
}

/** What a refusal means for the shard, by the error the driver gave (cuda.h's documentation). */
export function meaningOf(call: CheckpointCall, errorName: string): string {
  switch (errorName) {
    case 'CUDA_ERROR_NOT_READY':
    case 'CUDA_ERROR_TIMEOUT':
      return 'the process did not let go of the GPU in time (a CUDA call or kernel that did not return); it runs on as it was';
    case 'CUDA_ERROR_NOT_SUPPORTED':
      return 'the driver cannot checkpoint this process (it uses something the checkpoint API does not support, or the driver is too old)';
    case 'CUDA_ERROR_ILLEGAL_STATE':
      return `the process was not in the state ${call} needs (something else locked, checkpointed or restored it meanwhile)`;
    case 'CUDA_ERROR_INVALID_VALUE':
      // Measured on an H200, driver 580 (native/gpu-tests/RESULTS.md, 2026-11-29): a process that
      // opened another's memory over CUDA IPC checkpoints, then every restore answers this.
      return call === 'restore'
        ? "the driver cannot restore this process: one that opened another process's GPU memory over CUDA IPC (cuIpcOpenMemHandle: PyTorch tensors shared between processes, NCCL within a host) is checkpointed but never restored, and its CUDA calls wait for good; only restarting the shard helps"
        : 'the driver does not know this process (it exited, or never used CUDA)';
    case 'CUDA_ERROR_NOT_FOUND':
      return 'the driver does not know this process (it exited, or never used CUDA)';
    case 'CUDA_ERROR_OUT_OF_MEMORY':
      return call === 'restore'
        ? 'its GPU has no room for its memory now (something else took it while it was suspended)'
        : 'the host has no room for its memory';
    case 'CUDA_ERROR_NOT_PERMITTED':
      return 'the agent may not checkpoint this process (it must run as root on the host)';
    case 'CUDA_ERROR_NOT_INITIALIZED':
      return 'the driver was not initialised in the agent';
    default:
      return 'the driver refused; see its documentation of this error';
  }
}

const CUDA_SUCCESS = 0;
const STATES: readonly ProcessCheckpointState[] = ['running', 'locked', 'checkpointed', 'failed'];
/** Moving calls (lock, checkpoint, restore, unlock) running at once, host-wide. */
export const MOVE_CALL_SLOTS = 2;

type AsyncFn = { async: (...args: unknown[]) => void };
type SyncFn = (...args: unknown[]) => unknown;
type TypeSpec = Parameters<typeof koffi.type>[0];

let types: { lockArgs: koffi.TypeObject } | undefined;

/** cuda.h's CUcheckpointLockArgs: the one argument structure the agent fills. */
function lockArgsType(): koffi.TypeObject {
  types ??= {
    lockArgs: koffi.struct('CUcheckpointLockArgs', {
      timeoutMs: 'uint32_t',
      reserved0: 'uint32_t',
      reserved1: koffi.array('uint64_t', 7),
    }),
  };
  return types.lockArgs;
}

/**
 * Loads libcuda's checkpoint API from `libraryPath` and initialises the driver (cuInit; a
 * restore needs it). Throws CheckpointUnavailableError naming what is missing.
 */
export function openCheckpointApi(libraryPath: string): CheckpointApi {
  let library: koffi.LibraryHandle;
  try {
    library = koffi.load(libraryPath);
  } catch (error) {
    throw new CheckpointUnavailableError(
      `cannot load the CUDA driver library ${libraryPath}: ${errorMessage(error)}`,
      { cause: error },
    );
  }
  const declare = (name: string, result: TypeSpec, args: TypeSpec[]): unknown => {
    try {
      return library.func(name, result, args);
    } catch (error) {
      throw new CheckpointUnavailableError(
        `the CUDA driver ${libraryPath} has no ${name}: its checkpoint API needs driver 570 or newer (${errorMessage(error)})`,
        { cause: error },
      );
    }
  };
  const init = declare('cuInit', 'int', ['unsigned int']) as SyncFn;
  const errorName = declare('cuGetErrorName', 'int', ['int', koffi.out('const char **')]) as SyncFn;
  const errorString = declare('cuGetErrorString', 'int', [
    'int',
    koffi.out('const char **'),
  ]) as SyncFn;
  const fns = {
    state: declare(CALL_SYMBOLS.state, 'int', ['int', koffi.out('int *')]) as AsyncFn,
    lock: declare(CALL_SYMBOLS.lock, 'int', ['int', koffi.pointer(lockArgsType())]) as AsyncFn,
    checkpoint: declare(CALL_SYMBOLS.checkpoint, 'int', ['int', 'void *']) as AsyncFn,
    restore: declare(CALL_SYMBOLS.restore, 'int', ['int', 'void *']) as AsyncFn,
    unlock: declare(CALL_SYMBOLS.unlock, 'int', ['int', 'void *']) as AsyncFn,
  };
  const initialised = init(0);
  if (initialised !== CUDA_SUCCESS) {
    throw new CheckpointUnavailableError(
      `cuInit in ${libraryPath} returned ${String(initialised)}: the driver cannot be used for checkpoints`,
    );
  }
  const text = (fn: SyncFn, code: number): string => {
    const out: unknown[] = [null];
    try {
      if (fn(code, out) === CUDA_SUCCESS && typeof out[0] === 'string') return out[0];
    } catch {
      // fall through
    }
    return `CUDA error ${code}`;
  };
  const slots = new Slots(MOVE_CALL_SLOTS);
  const call = (fn: AsyncFn, args: unknown[]): Promise<number> =>
    new Promise((resolve, reject) => {
      fn.async(...args, (error: unknown, result: unknown) => {
        if (error !== null && error !== undefined) reject(error as Error);
        else resolve(result as number);
      });
    });
  const move = async (name: CheckpointCall, pid: number, args: unknown): Promise<void> => {
    const code = await slots.run(() => call(fns[name], [pid, args]));
    if (code !== CUDA_SUCCESS) {
      throw new CheckpointCallError(
        name,
        pid,
        code,
        text(errorName, code),
        text(errorString, code),
      );
    }
  };
  return {
    libraryPath,
    async state(pid) {
      const out = [0];
      const code = await call(fns.state, [pid, out]);
      if (code !== CUDA_SUCCESS) return undefined;
      return STATES[out[0] ?? -1] ?? 'failed';
    },
    lock: (pid, timeoutMs) =>
      move('lock', pid, { timeoutMs, reserved0: 0, reserved1: [0, 0, 0, 0, 0, 0, 0] }),
    checkpoint: (pid) => move('checkpoint', pid, null),
    restore: (pid) => move('restore', pid, null),
    unlock: (pid) => move('unlock', pid, null),
  };
}

/** At most `size` tasks at once; the others wait in arrival order. */
class Slots {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly size: number) {}

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.running >= this.size) await new Promise<void>((go) => this.waiting.push(go));
    else this.running++;
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next !== undefined) next();
      else this.running--;
    }
  }
}

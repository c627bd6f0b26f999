import { chmodSync, closeSync, openSync } from 'node:fs';
import { join } from 'node:path';

import type { SimulatedGpu } from './simulated-gpus.js';

/** File names of native/fakes' libraries. */
export const FAKE_LIBRARIES = { cuda: 'libcuda.so.1', nvml: 'libnvidia-ml.so.1' } as const;

/** Where a shard finds the fakes' shared state file. */
export const FAKE_STATE_IN_CONTAINER = '/run/gpushards-fake/state';

/**
 * The fakes' configuration (native/fakes/fake_common.c): which GPUs they simulate
 * (GPUSHARDS_FAKE_GPUS, "NAME:BYTES,...") and the file in which every process using them
 * keeps the GPUs' memory (GPUSHARDS_FAKE_STATE). The agent and all its shards share one
 * state file, so the simulated host behaves like one machine: what a shard allocates is
 * gone for the others, and NVML in the agent sees it. The host id seeds the GPUs' UUIDs
 * (GPUSHARDS_FAKE_UUID_SEED), so simulated hosts sharing one control plane never collide.
 */
export function fakeDriverEnv(
  gpus: readonly SimulatedGpu[],
  stateFile: string,
  hostId: string,
): Record<string, string> {
  return {
    GPUSHARDS_FAKE_GPUS: gpus.map((gpu) => `${gpu.model}:${gpu.totalBytes}`).join(','),
    GPUSHARDS_FAKE_STATE: stateFile,
    GPUSHARDS_FAKE_UUID_SEED: hostId,
  };
}

/** Creates the shared state file, writable by whatever user a shard runs as. */
export function prepareFakeState(stateDir: string): string {
  const stateFile = join(stateDir, 'fake-gpu-state');
  closeSync(openSync(stateFile, 'a', 0o666));
  chmodSync(stateFile, 0o666);
  return stateFile;
}

import type { SimulatedGpu } from './simulated-gpus.js';

/** File names of native/fakes' libraries. */
export const FAKE_LIBRARIES = { cuda: 'libcuda.so.1', nvml: 'libnvidia-ml.so.1' } as const;

/**
 * The environment that makes native/fakes simulate `gpus` (see native/fakes/README.md),
 * set in the agent's process and in every shard so both see the same GPUs.
 */
export function fakeDriverEnv(
  _hostId: string,
  gpus: readonly SimulatedGpu[],
): Record<string, string> {
  return {
    GPUSHARDS_FAKE_GPUS: gpus.map((gpu) => `${gpu.model}:${gpu.totalBytes}`).join(','),
  };
}

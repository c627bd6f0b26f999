import { parseSize } from '@gpushards/limits';

/**
 * GPUSHARDS_SIMULATE_GPUS: which GPUs to pretend this host has (no NVIDIA hardware).
 *
 *   spec   := group ("," group)*
 *   group  := [count "x"] [model ":"] size
 *   count  := 1-64 (default 1)
 *   model  := 1-96 printable characters other than "," and ":" (default "Simulated GPU")
 *   size   := a size as @gpushards/limits parseSize reads it: 24g, 80GiB, 1536m (1024-based)
 *
 * Examples: "2x24g" (two 24 GiB GPUs), "1xH100:80g,1xL4:24g", "NVIDIA A100-SXM4-80GB:80g".
 * Spaces around groups are ignored. At most 64 GPUs in all.
 */
export interface SimulatedGpu {
  readonly model: string;
  readonly totalBytes: number;
}

export const DEFAULT_SIMULATED_MODEL = 'Simulated GPU';
const MAX_SIMULATED_GPUS = 64;
const GROUP = /^(?:(\d+)\s*x\s*)?(?:([^,:]+):)?\s*([^,:]+)$/i;
const MODEL = /^[\x20-\x7e]{1,96}$/;

export class SimulatedGpuSpecError extends Error {
  override name = 'SimulatedGpuSpecError';
}

export function parseSimulatedGpus(spec: string): SimulatedGpu[] {
  const fail = (why: string): never => {
    throw new SimulatedGpuSpecError(
      `invalid simulated GPU list ${JSON.stringify(spec)}: ${why} ` +
        '(expected groups like "2x24g" or "1xH100:80g,1xL4:24g": [count x][model:]size, comma-separated)',
    );
  };
  if (spec.trim() === '') fail('it is empty');
  const gpus: SimulatedGpu[] = [];
  for (const rawGroup of spec.split(',')) {
    const group = rawGroup.trim();
    const match = GROUP.exec(group);
    if (match === null) fail(`cannot read the group ${JSON.stringify(group)}`);
    const [, rawCount, rawModel, rawSize = ''] = match as RegExpExecArray;
    const count = rawCount === undefined ? 1 : Number(rawCount);
    if (!Number.isInteger(count) || count < 1 || count > MAX_SIMULATED_GPUS) {
      fail(`the count in ${JSON.stringify(group)} must be 1-${MAX_SIMULATED_GPUS}`);
    }
    const model = rawModel === undefined ? DEFAULT_SIMULATED_MODEL : rawModel.trim();
    if (!MODEL.test(model))
      fail(`the model ${JSON.stringify(model)} must be 1-96 printable characters`);
    const size = parseSize(rawSize);
    if (!size.ok) fail(`the size in ${JSON.stringify(group)}: ${size.error.message}`);
    const totalBytes = (size as { bytes: number }).bytes;
    for (let i = 0; i < count; i++) gpus.push({ model, totalBytes });
  }
  if (gpus.length > MAX_SIMULATED_GPUS) fail(`${gpus.length} GPUs, at most ${MAX_SIMULATED_GPUS}`);
  return gpus;
}

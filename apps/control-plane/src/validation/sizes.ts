import {
  bytes,
  formatSize as formatLimitsSize,
  parseSize as parseLimitsSize,
} from '@gpushards/limits';

/**
 * The control plane's one door to the size grammar of libs/limits ("12g", "1536m", "2TiB";
 * 1024-based), shaped for input validation.
 */
export type SizeParse =
  | { readonly ok: true; readonly bytes: number }
  | { readonly ok: false; readonly zero: boolean; readonly message: string };

export function parseSize(input: string): SizeParse {
  const result = parseLimitsSize(input);
  if (result.ok) return { ok: true, bytes: result.bytes };
  return { ok: false, zero: result.error.code === 'ZERO', message: result.error.message };
}

/** "12 GiB", "1.5 GiB", "512 MiB". */
export function formatSize(count: number): string {
  return formatLimitsSize(bytes(count));
}

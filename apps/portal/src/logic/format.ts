import { bytes, formatSize, isShardState, parseSize, startDecision } from '@gpushards/limits';

/** A Bytes scalar ("12884901888") as a number (exact below 2^53, as the API promises). */
export function bytesOf(value: string | null | undefined): number {
  if (value === null || value === undefined || value === '') return 0;
  const n = Number(value);
  return Number.isFinite(n) && n >= 0 ? n : 0;
}

/** "12 GiB", "1.5 GiB", "0 B": 1024-based, as the API's `human` fields. */
export function humanBytes(value: number | string): string {
  const n = typeof value === 'string' ? bytesOf(value) : value;
  return formatSize(bytes(Math.max(0, Math.floor(n))));
}

/** A size typed by a person ("12g", "1536m"), or the reason it is not one. */
export function parseSizeInput(
  text: string,
): { ok: true; bytes: number } | { ok: false; message: string } {
  const result = parseSize(text);
  if (!result.ok) return { ok: false, message: result.error.message };
  if (text.trim().endsWith('%'))
    return { ok: false, message: 'percentages are refused: GPUs differ in size' };
  return { ok: true, bytes: result.bytes };
}

/** How long ago, shortest unit: "45s", "12m", "3h", "5d". */
export function age(since: string | Date | null | undefined, now: Date = new Date()): string {
  if (since === null || since === undefined) return '—';
  const then = typeof since === 'string' ? new Date(since) : since;
  const seconds = Math.max(0, Math.floor((now.getTime() - then.getTime()) / 1000));
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}

/** used / limit as 0..1 (0 when there is no limit), for gauges and bars. */
export function fraction(used: number, limit: number): number {
  if (!(limit > 0)) return 0;
  return Math.min(1, Math.max(0, used / limit));
}

/** "42%" of a fraction, rounded down so a full gauge means really full. */
export function percent(value: number): string {
  return `${Math.floor(value * 100)}%`;
}

/** GiB-hours for people: "0", "0.25", "12.5", "1,234". */
export function gibHours(value: number): string {
  if (value === 0) return '0';
  // A few seconds of a small shard: some, not none.
  if (value > 0 && value < 0.005) return '< 0.01';
  if (value >= 1000) return Math.round(value).toLocaleString('en-US');
  return String(Math.round(value * 100) / 100);
}

/** States in which a shard holds (or will hold) its reservation. */
export const LIVE_STATES = ['PENDING', 'PLACED', 'STARTING', 'RUNNING', 'STOPPING'] as const;

/** States from which stop makes sense, and delete. */
export function canStop(state: string): boolean {
  return [
    'PENDING',
    'PLACED',
    'STARTING',
    'RUNNING',
    'SUSPENDING',
    'SUSPENDED',
    'RESUMING',
  ].includes(state);
}
/** startShard runs a shard whose run ended again (through the queue): the lifecycle table decides. */
export function canStart(state: string): boolean {
  return isShardState(state) && startDecision(state).kind === 'start';
}
export function canDelete(state: string): boolean {
  return state !== 'DELETED';
}
export function canResize(state: string): boolean {
  return ['PLACED', 'STARTING', 'RUNNING'].includes(state);
}
/** setShardCompute takes PENDING shards too (stored, checked when placed). */
export function canSetCompute(state: string): boolean {
  return ['PENDING', 'PLACED', 'STARTING', 'RUNNING'].includes(state);
}

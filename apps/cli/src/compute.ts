import { parseDuration } from '@gpushards/limits';
import { CliError, EXIT } from './exit-codes.js';
import { age } from './output.js';

export type ComputeModeName = 'GUARANTEED' | 'CAPPED';

interface ActivityGpu {
  releasedAt: string | null;
  busyRatio: number | null;
  lastKernelAt: string | null;
}

/** --compute: a whole percent 1-100 ("25" or "25%"); "none" (set-compute only) for no share. */
export function checkShare(text: string, what: string, allowNone = false): number | null {
  const value = text.trim().replace(/%$/, '');
  if (allowNone && value.toLowerCase() === 'none') return null;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 100) {
    throw new CliError(
      `${what}: "${text}" is not a share: a whole percent from 1 to 100${allowNone ? ', or none' : ''}`,
      EXIT.USAGE,
      'BAD_USER_INPUT',
    );
  }
  return Number(value);
}

/** --compute-mode: guaranteed or capped (any case); capped needs a share, as the API says. */
export function checkMode(
  text: string | undefined,
  share: number | null,
  shareOption = '--compute <percent>',
): ComputeModeName {
  const mode = (text ?? 'guaranteed').trim().toUpperCase();
  if (mode !== 'GUARANTEED' && mode !== 'CAPPED') {
    throw new CliError(
      `--compute-mode: "${text}" is not a mode: guaranteed or capped`,
      EXIT.USAGE,
      'BAD_USER_INPUT',
    );
  }
  if (mode === 'CAPPED' && share === null) {
    throw new CliError(
      `--compute-mode capped needs a share to cap at (${shareOption})`,
      EXIT.USAGE,
      'BAD_USER_INPUT',
    );
  }
  return mode;
}

/** A duration option ("30m", "2h", "600"), in whole seconds. */
export function checkDuration(text: string, what: string): number {
  const result = parseDuration(text);
  if (!result.ok) throw new CliError(`${what}: ${result.message}`, EXIT.USAGE, 'BAD_USER_INPUT');
  return result.seconds;
}

/** "25% capped", "25% guaranteed", or "-" for none (the default split). */
export function shareLabel(percent: number | null, mode: string): string {
  if (percent === null) return '-';
  return `${percent}% ${mode === 'CAPPED' ? 'capped' : 'guaranteed'}`;
}

/** The mean busy ratio of its live GPUs as "37%", or "-" where the host reports none. */
export function busyLabel(gpus: readonly ActivityGpu[]): string {
  const reported = gpus.filter((g) => g.releasedAt === null && g.busyRatio !== null);
  if (reported.length === 0) return '-';
  const mean = reported.reduce((n, g) => n + g.busyRatio!, 0) / reported.length;
  return `${Math.round(mean * 100)}%`;
}

/**
 * How long a RUNNING shard has launched no kernel on any live GPU (from its start if it never
 * did), as "12m"; "-" where its host reports no activity or it is not running.
 */
export function idleLabel(shard: {
  state: string;
  startedAt: string | null;
  gpus: readonly ActivityGpu[];
}): string {
  if (shard.state !== 'RUNNING') return '-';
  const live = shard.gpus.filter((g) => g.releasedAt === null);
  if (!live.some((g) => g.busyRatio !== null || g.lastKernelAt !== null)) return '-';
  const last = live
    .map((g) => g.lastKernelAt)
    .filter((at): at is string => at !== null)
    .sort()
    .at(-1);
  return age(last ?? shard.startedAt);
}

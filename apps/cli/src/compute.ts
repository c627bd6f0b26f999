import type { Command } from 'commander';
import { parseDuration } from '@gpushards/limits';
import { CliError, EXIT } from './exit-codes.js';
import { age } from './output.js';

export type ComputeModeName = 'GUARANTEED' | 'CAPPED' | 'ISOLATED';
const MODES: readonly ComputeModeName[] = ['GUARANTEED', 'CAPPED', 'ISOLATED'];

/** What --compute-mode takes, for the help of every command that has it. */
export const COMPUTE_MODE_HELP =
  'guaranteed (at least its share, and any idle time), capped (never more; needs --compute) or isolated (its share of the SMs in an MPS partition of its own, on hosts that run one; needs --compute; the share is fixed while it runs)';

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

/**
 * --compute-mode: guaranteed, capped or isolated (any case); capped and isolated need a share,
 * as the API says.
 */
export function checkMode(
  text: string | undefined,
  share: number | null,
  shareOption = '--compute <percent>',
): ComputeModeName {
  const mode = (text ?? 'guaranteed').trim().toUpperCase() as ComputeModeName;
  if (!MODES.includes(mode)) {
    throw new CliError(
      `--compute-mode: "${text}" is not a mode: guaranteed, capped or isolated`,
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
  if (mode === 'ISOLATED' && share === null) {
    throw new CliError(
      `--compute-mode isolated needs a share: its part of the host's MPS partition (${shareOption})`,
      EXIT.USAGE,
      'BAD_USER_INPUT',
    );
  }
  return mode;
}

/** --compute and --compute-mode, as `shards create` and `preview` take them. */
export function withComputeOptions(command: Command): Command {
  return command
    .option(
      '--compute <percent>',
      "compute share of each GPU, a whole percent 1-100 within the team's bound (default: none, the default split)",
    )
    .option('--compute-mode <mode>', COMPUTE_MODE_HELP);
}

/** Those two options as the API's input: nothing without a share (the default split). */
export function computeInput(options: { compute?: unknown; computeMode?: unknown }): {
  share: number | null;
  mode: ComputeModeName;
  input: { computeSharePercent?: number; computeMode?: ComputeModeName };
} {
  const share =
    options.compute === undefined ? null : checkShare(String(options.compute), '--compute');
  const mode = checkMode(options.computeMode as string | undefined, share);
  return {
    share,
    mode,
    input: share !== null ? { computeSharePercent: share, computeMode: mode } : {},
  };
}

/** A duration option ("30m", "2h", "600"), in whole seconds. */
export function checkDuration(text: string, what: string): number {
  const result = parseDuration(text);
  if (!result.ok) throw new CliError(`${what}: ${result.message}`, EXIT.USAGE, 'BAD_USER_INPUT');
  return result.seconds;
}

/** "25% capped", "25% guaranteed", "25% isolated", or "-" for none (the default split). */
export function shareLabel(percent: number | null, mode: string): string {
  if (percent === null) return '-';
  return `${percent}% ${mode === 'CAPPED' ? 'capped' : mode === 'ISOLATED' ? 'isolated' : 'guaranteed'}`;
}

/**
 * A GPU's compute as `hosts` shows it: "25% guaranteed", and on a host with an MPS partition
 * "…, isolated 10% of a 40% partition".
 */
export function gpuComputeLabel(gpu: {
  computeGuaranteedPercent: number;
  computeIsolatedPoolPercent: number;
  computeIsolatedPercent: number;
}): string {
  const guaranteed = `${gpu.computeGuaranteedPercent}% guaranteed`;
  if (gpu.computeIsolatedPoolPercent <= 0) return guaranteed;
  return `${guaranteed}, isolated ${gpu.computeIsolatedPercent}% of a ${gpu.computeIsolatedPoolPercent}% partition`;
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

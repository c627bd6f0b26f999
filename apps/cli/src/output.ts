import type { Command } from 'commander';
import Table from 'cli-table3';
import { parseSize } from '@gpushards/limits';
import { CliError, EXIT } from './exit-codes.js';

/** A borderless table, as kubectl and docker print them. */
export function table(head: string[], rows: (string | number | null | undefined)[][]): string {
  const t = new Table({
    head,
    chars: {
      top: '',
      'top-mid': '',
      'top-left': '',
      'top-right': '',
      bottom: '',
      'bottom-mid': '',
      'bottom-left': '',
      'bottom-right': '',
      left: '',
      'left-mid': '',
      mid: '',
      'mid-mid': '',
      right: '',
      'right-mid': '',
      middle: '  ',
    },
    style: { head: [], border: [], 'padding-left': 0, 'padding-right': 0 },
  });
  for (const row of rows)
    t.push(row.map((cell) => (cell === null || cell === undefined ? '-' : String(cell))));
  // cli-table3 pads every cell to its column's width, the last one too: no line may end in
  // spaces (they show up in diffs, in copied output and in exact-line comparisons).
  return t
    .toString()
    .split('\n')
    .map((line) => line.trimEnd())
    .join('\n');
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** `-q, --quiet` on a command that prints shards, hosts or teams: only their ids, as `docker ps -q`. */
export function withQuiet(command: Command): Command {
  return command.option(
    '-q, --quiet',
    'print only the id (one per line for a list), for scripts: $(gpushards ...)',
  );
}

/**
 * With -q, writes the ids one per line and answers true (refusing --json with it); without,
 * answers false and the command prints as it would.
 */
export function printIds(command: Command, ids: readonly string[]): boolean {
  const options = command.optsWithGlobals<{ quiet?: boolean; json?: boolean }>();
  if (!options.quiet) return false;
  if (options.json)
    throw new CliError('--quiet and --json: choose one', EXIT.USAGE, 'BAD_USER_INPUT');
  process.stdout.write(ids.map((id) => `${id}\n`).join(''));
  return true;
}

/** A size as users write it ("12g", "1536m"), checked before anything is sent. */
export function checkSize(text: string, what = 'size'): string {
  const result = parseSize(text);
  if (!result.ok)
    throw new CliError(`${what}: ${result.error.message}`, EXIT.USAGE, 'BAD_USER_INPUT');
  if (text.trim().endsWith('%')) {
    throw new CliError(
      `${what}: percentages are refused: GPUs differ in size`,
      EXIT.USAGE,
      'BAD_USER_INPUT',
    );
  }
  return text.trim();
}

/** Seconds ago as "45s", "12m", "3h", "5d". */
export function age(since: string | null | undefined, now = Date.now()): string {
  if (!since) return '-';
  const s = Math.max(0, Math.floor((now - new Date(since).getTime()) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

/** "in about 3m" until a time (an estimate), "any moment" once it has passed. */
export function until(at: string, now = Date.now()): string {
  const s = Math.floor((new Date(at).getTime() - now) / 1000);
  return s <= 0 ? 'any moment' : `in about ${age(new Date(now - s * 1000).toISOString(), now)}`;
}

export function csvField(value: string | number): string {
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** "2026-11-01" (a UTC day) or a full ISO time with a zone, as the API's usage window. */
export function isoTime(text: string, what: string): string {
  const value = /^\d{4}-\d{2}-\d{2}$/.test(text) ? `${text}T00:00:00Z` : text;
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) {
    throw new CliError(
      `${what}: "${text}" is not a date (like 2026-11-01 or 2026-11-01T12:00:00Z)`,
      EXIT.USAGE,
      'BAD_USER_INPUT',
    );
  }
  return date.toISOString();
}

/**
 * Durations as people type them, for the idle policy in the portal and the CLI: "90s", "30m",
 * "2h", "1d", "1h30m", or plain seconds ("600"). Units are s, m, h, d, each at most once, largest
 * first; the result is whole seconds. `formatDuration` writes the shortest such form back.
 */

export type DurationParseResult =
  | { readonly ok: true; readonly seconds: number }
  | { readonly ok: false; readonly message: string };

const UNIT_SECONDS: Readonly<Record<string, number>> = { d: 86_400, h: 3_600, m: 60, s: 1 };
const ORDER = ['d', 'h', 'm', 's'] as const;
const DURATION_SHAPE = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/;
const EXAMPLES = 'like 90s, 30m, 2h, 1d or 1h30m';
/** Beyond this, seconds stop being exact integers in a double. */
const MAX_SECONDS = Number.MAX_SAFE_INTEGER;

export function parseDuration(input: string): DurationParseResult {
  const text = input.trim().toLowerCase();
  if (text === '') return { ok: false, message: `duration is empty: give one ${EXAMPLES}` };
  let seconds: number;
  if (/^\d+$/.test(text)) {
    seconds = Number(text);
  } else {
    const parts = DURATION_SHAPE.exec(text);
    if (parts === null) {
      return { ok: false, message: `"${input.trim()}" is not a duration: ${EXAMPLES}` };
    }
    seconds = ORDER.reduce(
      (sum, unit, i) => sum + Number(parts[i + 1] ?? 0) * UNIT_SECONDS[unit]!,
      0,
    );
  }
  if (!Number.isSafeInteger(seconds) || seconds > MAX_SECONDS) {
    return { ok: false, message: `"${input.trim()}" is too long a duration` };
  }
  return { ok: true, seconds };
}

/** Whole seconds as the shortest parseable form: 5400 → "1h30m", 0 → "0s". */
export function formatDuration(seconds: number): string {
  if (!Number.isSafeInteger(seconds) || seconds < 0) {
    throw new RangeError(`not a whole number of seconds: ${seconds}`);
  }
  if (seconds === 0) return '0s';
  let rest = seconds;
  let text = '';
  for (const unit of ORDER) {
    const size = UNIT_SECONDS[unit]!;
    const count = Math.floor(rest / size);
    if (count > 0) text += `${count}${unit}`;
    rest -= count * size;
  }
  return text;
}

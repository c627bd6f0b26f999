import { InputCheck } from '../validation/input.js';

const DAY_MS = 86_400_000;

/**
 * The longest window one `usage` query may cover. Accounting reads the window's samples on
 * demand, so the window bounds the work; windows add up exactly, so a longer period is the
 * sum of its months.
 */
export const MAX_USAGE_WINDOW_DAYS = 31;

const EXAMPLE = '"2026-01-31T00:00:00Z"';

/**
 * ISO 8601 date and time with an explicit zone (Z or ±hh:mm), seconds and up to three
 * fraction digits optional. A time without a zone would be read in the server's zone, so it is
 * refused rather than guessed.
 */
const TIMESTAMP =
  /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

function daysInMonth(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/** Epoch milliseconds of a timestamp, or null when it is not one (2026-02-30, before 1970). */
export function parseTimestamp(text: string): number | null {
  const match = TIMESTAMP.exec(text);
  if (match === null) return null;
  const [year, month, day, hour, minute, second, offsetHours, offsetMinutes] = [
    match[1],
    match[2],
    match[3],
    match[4],
    match[5],
    match[6] ?? '0',
    match[10] ?? '0',
    match[11] ?? '0',
  ].map(Number) as [number, number, number, number, number, number, number, number];
  const millisecond = Number((match[7] ?? '').padEnd(3, '0'));
  if (year < 1970 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month))
    return null;
  if (hour > 23 || minute > 59 || second > 59 || offsetHours > 23 || offsetMinutes > 59) {
    return null;
  }
  const offsetMs = (match[9] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMinutes) * 60_000;
  return Date.UTC(year, month - 1, day, hour, minute, second, millisecond) - offsetMs;
}

export interface UsageWindow {
  readonly from: Date;
  readonly to: Date;
}

/** [from, to) from the query's arguments; every problem is reported as BAD_USER_INPUT. */
export function parseUsageWindow(from: string, to: string): UsageWindow {
  const check = new InputCheck();
  const fromMs = parseTimestamp(from);
  const toMs = parseTimestamp(to);
  const timestampMessage = `must be an ISO 8601 date and time with a zone, like ${EXAMPLE}`;
  if (fromMs === null) check.problem('from', timestampMessage);
  if (toMs === null) check.problem('to', timestampMessage);
  if (fromMs !== null && toMs !== null) {
    if (toMs <= fromMs) {
      check.problem('to', 'must be after from');
    } else if (toMs - fromMs > MAX_USAGE_WINDOW_DAYS * DAY_MS) {
      check.problem(
        'to',
        `the window may cover at most ${MAX_USAGE_WINDOW_DAYS} days; query longer periods month by month and add them up`,
      );
    }
  }
  check.done();
  return { from: new Date(fromMs!), to: new Date(toMs!) };
}

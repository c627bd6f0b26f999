/** Usage over time: the day windows to ask the API for, and the CSV people download. */

export const MAX_DAYS = 31;
const DAY_MS = 86_400_000;

export interface DayWindow {
  /** "2026-11-24" (UTC). */
  readonly day: string;
  readonly from: string;
  readonly to: string;
}

/** Start of the UTC day of a "YYYY-MM-DD" string or a Date. */
export function utcDay(value: string | Date): Date {
  const date = typeof value === 'string' ? new Date(`${value}T00:00:00Z`) : value;
  if (Number.isNaN(date.getTime())) throw new Error(`not a date: ${String(value)}`);
  return new Date(Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), date.getUTCDate()));
}

/** "YYYY-MM-DD" of a date, in UTC. */
export function dayString(date: Date): string {
  return date.toISOString().slice(0, 10);
}

/**
 * One window per UTC day from `first` to `last`, both included (at most 31 days: the API's
 * limit for one report). Throws with a message people can act on otherwise.
 */
export function dayWindows(first: string, last: string): DayWindow[] {
  const start = utcDay(first);
  const end = utcDay(last);
  if (end < start) throw new Error(`the window ends (${last}) before it starts (${first})`);
  const days = Math.round((end.getTime() - start.getTime()) / DAY_MS) + 1;
  if (days > MAX_DAYS) throw new Error(`${days} days asked; at most ${MAX_DAYS} at once`);
  const windows: DayWindow[] = [];
  for (let i = 0; i < days; i += 1) {
    const from = new Date(start.getTime() + i * DAY_MS);
    const to = new Date(from.getTime() + DAY_MS);
    windows.push({ day: dayString(from), from: from.toISOString(), to: to.toISOString() });
  }
  return windows;
}

export interface DayUsage {
  readonly day: string;
  readonly reservedGibHours: number;
  readonly usedGibHours: number;
  /** Elastic shards' GPU memory held in host RAM, apart from reserved (docs/elastic.md). */
  readonly suspendedGibHours: number;
  readonly peakUsedBytes: number;
}

/** Datasets for the chart: labels and the three series, in day order. */
export function chartSeries(rows: readonly DayUsage[]): {
  labels: string[];
  reserved: number[];
  used: number[];
  suspended: number[];
} {
  const sorted = [...rows].sort((a, b) => a.day.localeCompare(b.day));
  return {
    labels: sorted.map((r) => r.day),
    reserved: sorted.map((r) => round(r.reservedGibHours)),
    used: sorted.map((r) => round(r.usedGibHours)),
    suspended: sorted.map((r) => round(r.suspendedGibHours)),
  };
}

function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}

/**
 * RFC 4180 CSV, one line per day, with a header; numbers are not rounded for display. The
 * suspended column comes last (as in `gpushards usage --csv`), so readers of the older five
 * columns by position read them unchanged.
 */
export function usageCsv(team: string, rows: readonly DayUsage[]): string {
  const lines = ['team,day,reserved_gib_hours,used_gib_hours,peak_used_bytes,suspended_gib_hours'];
  for (const row of [...rows].sort((a, b) => a.day.localeCompare(b.day))) {
    lines.push(
      [
        csvField(team),
        row.day,
        row.reservedGibHours,
        row.usedGibHours,
        row.peakUsedBytes,
        row.suspendedGibHours,
      ].join(','),
    );
  }
  return `${lines.join('\r\n')}\r\n`;
}

export function csvField(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value;
}

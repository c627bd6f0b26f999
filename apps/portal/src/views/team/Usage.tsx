import { useEffect, useRef, useState } from 'react';
import { useClient } from 'urql';
import {
  BarController,
  BarElement,
  CategoryScale,
  Chart,
  Legend,
  LinearScale,
  Tooltip,
} from 'chart.js';
import { UsageByDayDocument } from '@gpushards/graphql-client';
import { bytesOf, gibHours } from '../../logic/format.js';
import { chartSeries, dayString, dayWindows, usageCsv, type DayUsage } from '../../logic/usage.js';
import { ErrorBox, Loading, Section } from '../../ui.js';
import type { ErrorLike } from '../../logic/errors.js';

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Legend, Tooltip);

const DAY_MS = 86_400_000;

interface UsageReport {
  /** The window the rows are of, which may differ from the one being asked for. */
  readonly first: string;
  readonly last: string;
  readonly rows: DayUsage[];
}

export function Usage({ teamId, teamName }: { teamId: string; teamName: string }) {
  const client = useClient();
  const today = dayString(new Date());
  const [first, setFirst] = useState(dayString(new Date(Date.now() - 6 * DAY_MS)));
  const [last, setLast] = useState(today);
  // The rows shown, with the window they are of: they stay (chart, total, export) while another
  // window loads, until its rows replace them, so an export never finds them gone mid-way.
  const [report, setReport] = useState<UsageReport | null>(null);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState<ErrorLike | null>(null);
  const canvas = useRef<HTMLCanvasElement>(null);

  useEffect(() => {
    let cancelled = false;
    let windows;
    try {
      windows = dayWindows(first, last);
    } catch (cause) {
      setError({
        graphQLErrors: [
          { message: (cause as Error).message, extensions: { code: 'BAD_USER_INPUT' } },
        ],
      });
      return;
    }
    setError(null);
    setLoading(true);
    // One request for the whole window: the API answers each UTC day of it.
    void client
      .query(
        UsageByDayDocument,
        { teamId, from: windows[0]!.from, to: windows[windows.length - 1]!.to },
        { requestPolicy: 'network-only' },
      )
      .toPromise()
      .then((result) => {
        if (cancelled) return;
        setLoading(false);
        if (result.error || !result.data) {
          setError(result.error ?? { message: 'no usage report came back' });
          return;
        }
        setReport({
          first,
          last,
          rows: result.data.usage.days.map((d) => ({
            day: d.day,
            reservedGibHours: d.reservedGibHours,
            usedGibHours: d.usedGibHours,
            suspendedGibHours: d.suspendedGibHours,
            peakUsedBytes: bytesOf(d.peakUsed.bytes),
          })),
        });
      });
    return () => {
      cancelled = true;
    };
  }, [client, teamId, first, last]);

  const rows = report?.rows;

  useEffect(() => {
    if (!rows || !canvas.current) return;
    const series = chartSeries(rows);
    const chart = new Chart(canvas.current, {
      type: 'bar',
      data: {
        labels: series.labels,
        datasets: [
          { label: 'reserved GiB-hours', data: series.reserved, backgroundColor: '#8aa4d6' },
          { label: 'used GiB-hours', data: series.used, backgroundColor: '#2f6f4f' },
          // Elastic shards' memory in host RAM: not reserved on a GPU meanwhile.
          ...(series.suspended.some((v) => v > 0)
            ? [
                {
                  label: 'suspended GiB-hours',
                  data: series.suspended,
                  backgroundColor: '#c9a227',
                },
              ]
            : []),
        ],
      },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        scales: { y: { beginAtZero: true, title: { display: true, text: 'GiB-hours' } } },
      },
    });
    return () => chart.destroy();
  }, [rows]);

  function download() {
    if (!report) return;
    // A data: URL, not a blob: one, so nothing has to be revoked while the download starts.
    const link = document.createElement('a');
    link.href = `data:text/csv;charset=utf-8,${encodeURIComponent(usageCsv(teamName, report.rows))}`;
    link.download = `gpushards-usage-${teamName}-${report.first}-${report.last}.csv`;
    document.body.append(link);
    link.click();
    link.remove();
  }

  const total = rows?.reduce((n, r) => n + r.reservedGibHours, 0) ?? 0;
  const used = rows?.reduce((n, r) => n + r.usedGibHours, 0) ?? 0;
  const suspended = rows?.reduce((n, r) => n + r.suspendedGibHours, 0) ?? 0;
  return (
    <Section
      title="Usage"
      actions={
        <div className="row">
          <label>
            From{' '}
            <input
              type="date"
              value={first}
              max={last}
              onChange={(e) => setFirst(e.target.value)}
            />
          </label>
          <label>
            to{' '}
            <input type="date" value={last} max={today} onChange={(e) => setLast(e.target.value)} />
          </label>
          <button onClick={download} disabled={!report}>
            Export CSV
          </button>
        </div>
      }
    >
      <ErrorBox error={error} />
      {loading && !error && <Loading what="usage" />}
      {report && (
        <p className="muted">
          {gibHours(total)} GiB-hours reserved, {gibHours(used)} used
          {suspended > 0 && `, ${gibHours(suspended)} suspended in host RAM`}, UTC days{' '}
          {report.first} to {report.last}.
        </p>
      )}
      <div className="chart">
        <canvas
          ref={canvas}
          role="img"
          aria-label="Reserved, used and suspended GiB-hours per day"
        />
      </div>
    </Section>
  );
}

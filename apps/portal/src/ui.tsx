import type { ReactNode } from 'react';
import { explainError, type ErrorLike } from './logic/errors.js';
import { fraction, percent } from './logic/format.js';

export function ErrorBox({ error }: { error: ErrorLike | undefined | null }) {
  if (!error) return null;
  const explained = explainError(error);
  return (
    <div className="error" role="alert" data-code={explained.code}>
      <strong>{explained.title}</strong>
      <div>{explained.detail}</div>
      {explained.lines.length > 0 && (
        <ul>
          {explained.lines.map((line) => (
            <li key={line}>{line}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p className="muted" role="status" aria-live="polite">
      Loading {what}…
    </p>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <p className="empty">{children}</p>;
}

export function Gauge(props: {
  label: string;
  used: number;
  limit: number;
  text: string;
  /** What the gauge measures, on hover. */
  hint?: string;
}) {
  const share = fraction(props.used, props.limit);
  const level = share >= 0.9 ? 'high' : share >= 0.7 ? 'mid' : 'low';
  return (
    <div className="gauge" title={props.hint}>
      <div className="gauge-label">
        <span>{props.label}</span>
        <span>{props.text}</span>
      </div>
      <div
        className="gauge-track"
        role="meter"
        aria-label={props.label}
        aria-valuemin={0}
        aria-valuemax={props.limit}
        aria-valuenow={props.used}
        aria-valuetext={`${props.text} (${percent(share)})`}
      >
        <div className={`gauge-fill ${level}`} style={{ width: percent(share) }} />
      </div>
    </div>
  );
}

export function Section({
  title,
  children,
  actions,
}: {
  title: string;
  children: ReactNode;
  actions?: ReactNode;
}) {
  return (
    <section aria-label={title}>
      <div className="section-head">
        <h2>{title}</h2>
        {actions}
      </div>
      {children}
    </section>
  );
}

import { useState, type FormEvent } from 'react';
import { useMutation } from 'urql';
import { SetGpuOvercommitDocument } from '@gpushards/graphql-client';
import { ErrorBox } from '../../ui.js';

/** The GPU label's note of its oversubscription ratio; null at 1 (none, the default). */
export function overcommitNote(ratio: number): string | null {
  return ratio === 1 ? null : `overcommit ×${ratio}`;
}

/** What the ratio field holds: a number from 1; the API says the upper bound. */
export function ratioProblem(text: string): string | null {
  const value = Number(text.trim());
  return text.trim() !== '' && Number.isFinite(value) && value >= 1
    ? null
    : 'a number from 1 (no oversubscription), like 3';
}

/**
 * setGpuOvercommit for every GPU of a host (admins; docs/elastic.md): the caps on each, resident
 * and suspended, may add up to its memory × ratio, the part past its memory only through elastic
 * shards waiting in host RAM. The API refuses (CONFLICT) a ratio below what is already there.
 */
export function OvercommitForm(props: { hostId: string; hostName: string; ratio: number }) {
  const [saved, save] = useMutation(SetGpuOvercommitDocument);
  const [ratio, setRatio] = useState(String(props.ratio));
  const [done, setDone] = useState<string | null>(null);
  const problem = ratioProblem(ratio);
  async function submit(event: FormEvent) {
    event.preventDefault();
    setDone(null);
    if (problem !== null) return;
    const value = Number(ratio.trim());
    const result = await save({ hostId: props.hostId, ratio: value });
    if (result.data) setDone(`${result.data.setGpuOvercommit} GPU(s) at ×${value}`);
  }
  return (
    <form
      className="row"
      aria-label={`Overcommit of ${props.hostName}`}
      onSubmit={submit}
      onChange={() => setDone(null)}
    >
      <label title="elastic shards' caps may add up to each GPU's memory × this, the part past it suspended to host RAM (docs/elastic.md); 1: none">
        Overcommit ratio{' '}
        <input
          value={ratio}
          inputMode="decimal"
          size={4}
          aria-invalid={problem !== null}
          onChange={(e) => setRatio(e.target.value)}
        />
      </label>
      <button type="submit" disabled={saved.fetching || problem !== null}>
        Set ratio
      </button>
      {problem !== null && <span className="problem">{problem}</span>}
      {done !== null && (
        <span className="ok small" role="status">
          {done}
        </span>
      )}
      <ErrorBox error={saved.error} />
    </form>
  );
}

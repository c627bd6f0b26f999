// An admin's forms for a team's policies: its quota (setQuotaPolicy) and its idle policy.
import { useState, type FormEvent } from 'react';
import { useMutation } from 'urql';
import { formatDuration, parseDuration } from '@gpushards/limits';
import {
  SetIdlePolicyDocument,
  SetQuotaDocument,
  type TeamFieldsFragment,
} from '@gpushards/graphql-client';
import { parseSizeInput } from '../../logic/format.js';
import { ErrorBox } from '../../ui.js';

type QuotaPolicy = NonNullable<TeamFieldsFragment['quotaPolicy']>;

/**
 * setQuotaPolicy, starting from the team's policy where it has one (a save changes only what the
 * admin edits: allowElastic and the compute bound are not reset by setting the memory), else
 * from a small one.
 */
export function QuotaForm(props: {
  teamId: string;
  current: QuotaPolicy | null | undefined;
  onDone: () => void;
}) {
  const { teamId, current, onDone } = props;
  const [saved, save] = useMutation(SetQuotaDocument);
  const [maxTotal, setMaxTotal] = useState(current ? sizeInput(current.maxTotal.bytes) : '16g');
  const [maxPerShard, setMaxPerShard] = useState(
    current ? sizeInput(current.maxPerShard.bytes) : '8g',
  );
  const [maxShards, setMaxShards] = useState(current?.maxShards ?? 4);
  const [priority, setPriority] = useState(current?.priority ?? 0);
  const [maxCompute, setMaxCompute] = useState(
    current?.maxComputeSharePercent === null || current?.maxComputeSharePercent === undefined
      ? ''
      : String(current.maxComputeSharePercent),
  );
  const [allowElastic, setAllowElastic] = useState(current?.allowElastic ?? false);
  const sizeProblem = [maxTotal, maxPerShard].map((v) => parseSizeInput(v)).find((r) => !r.ok);
  const computeBound = maxCompute.trim().replace(/%$/, '');
  const computeProblem =
    computeBound === '' || (/^\d+$/.test(computeBound) && Number(computeBound) <= 100)
      ? null
      : 'max compute share: a whole percent from 0 (no shares) to 100, or blank for up to 100';
  const problem = sizeProblem && !sizeProblem.ok ? sizeProblem.message : computeProblem;
  async function submit(event: FormEvent) {
    event.preventDefault();
    if (problem) return;
    const result = await save({
      teamId,
      input: {
        maxTotal,
        maxPerShard,
        maxShards,
        priority,
        ...(computeBound === '' ? {} : { maxComputeSharePercent: Number(computeBound) }),
        allowElastic,
      },
    });
    if (result.data) onDone();
  }
  return (
    <form className="row" aria-label="Quota policy" onSubmit={submit}>
      <label>
        Max total <input value={maxTotal} onChange={(e) => setMaxTotal(e.target.value)} />
      </label>
      <label>
        Max per shard <input value={maxPerShard} onChange={(e) => setMaxPerShard(e.target.value)} />
      </label>
      <label>
        Max shards{' '}
        <input
          type="number"
          min={0}
          value={maxShards}
          onChange={(e) => setMaxShards(Number(e.target.value))}
        />
      </label>
      <label>
        Priority{' '}
        <input
          type="number"
          value={priority}
          onChange={(e) => setPriority(Number(e.target.value))}
        />
      </label>
      <label>
        Max compute share %{' '}
        <input
          value={maxCompute}
          placeholder="100"
          inputMode="numeric"
          onChange={(e) => setMaxCompute(e.target.value)}
        />
      </label>
      <label title="its shards may be elastic: suspended to host RAM while idle (docs/elastic.md)">
        <input
          type="checkbox"
          checked={allowElastic}
          onChange={(e) => setAllowElastic(e.target.checked)}
        />{' '}
        Elastic shards
      </label>
      <button type="submit" disabled={saved.fetching || problem !== null}>
        Save quota
      </button>
      {problem && <span className="problem">{problem}</span>}
      <ErrorBox error={saved.error} />
    </form>
  );
}

/** A size in bytes as the size fields take it, exactly: "16g", "1536m", or bytes. */
function sizeInput(bytes: string): string {
  const value = BigInt(bytes);
  if (value > 0n && value % 2n ** 30n === 0n) return `${value / 2n ** 30n}g`;
  if (value > 0n && value % 2n ** 20n === 0n) return `${value / 2n ** 20n}m`;
  return bytes;
}

/**
 * setTeamIdlePolicy: report a shard with no kernel after a time, and optionally stop it, or
 * suspend it to host RAM if it is elastic; starting from the team's policy where it has one.
 */
export function IdlePolicyForm(props: {
  teamId: string;
  teamName: string;
  current: TeamFieldsFragment['idlePolicy'] | undefined;
  onDone: () => void;
}) {
  const [saved, save] = useMutation(SetIdlePolicyDocument);
  const now = props.current;
  const shown = (seconds: number | null | undefined) =>
    seconds === null || seconds === undefined ? '' : formatDuration(seconds);
  const [after, setAfter] = useState(now ? shown(now.idleAfterSeconds) : '30m');
  const [stopAfter, setStopAfter] = useState(shown(now?.stopAfterSeconds));
  const [suspendAfter, setSuspendAfter] = useState(shown(now?.suspendAfterSeconds));
  const reportAt = after.trim() === '' ? null : parseDuration(after);
  const stopAt = stopAfter.trim() === '' ? null : parseDuration(stopAfter);
  const suspendAt = suspendAfter.trim() === '' ? null : parseDuration(suspendAfter);
  const problem =
    reportAt && !reportAt.ok
      ? reportAt.message
      : stopAt && !stopAt.ok
        ? stopAt.message
        : suspendAt && !suspendAt.ok
          ? suspendAt.message
          : reportAt === null && (stopAt !== null || suspendAt !== null)
            ? 'stopping or suspending needs a time to report first'
            : null;
  async function submit(event: FormEvent) {
    event.preventDefault();
    if (problem) return;
    const result = await save({
      teamId: props.teamId,
      idleAfterSeconds: reportAt?.ok ? reportAt.seconds : null,
      stopAfterSeconds: stopAt?.ok ? stopAt.seconds : null,
      suspendAfterSeconds: suspendAt?.ok ? suspendAt.seconds : null,
    });
    if (result.data) props.onDone();
  }
  return (
    <form className="row" aria-label={`Idle policy of ${props.teamName}`} onSubmit={submit}>
      <label>
        Report idle after{' '}
        <input value={after} placeholder="none" onChange={(e) => setAfter(e.target.value)} />
      </label>
      <label>
        Stop after{' '}
        <input
          value={stopAfter}
          placeholder="never"
          onChange={(e) => setStopAfter(e.target.value)}
        />
      </label>
      <label title="an elastic shard's GPU memory goes to host RAM instead; it resumes when it computes (docs/elastic.md)">
        Suspend elastic after{' '}
        <input
          value={suspendAfter}
          placeholder="never"
          onChange={(e) => setSuspendAfter(e.target.value)}
        />
      </label>
      <span className="muted small">like 30m or 2h; blank report time: no policy</span>
      <button type="submit" disabled={saved.fetching || problem !== null}>
        Save idle policy
      </button>
      {problem && <span className="problem">{problem}</span>}
      <ErrorBox error={saved.error} />
    </form>
  );
}

import { useEffect, useState, type FormEvent } from 'react';
import { useMutation, useQuery } from 'urql';
import { CreateShardDocument, PreviewDocument, TeamDocument } from '@gpushards/graphql-client';
import { parseSizeInput } from '../../logic/format.js';
import {
  COMPUTE_MODE_HINTS,
  computeProblem,
  parseSharePercent,
  shareLabel,
  type ComputeModeName,
} from '../../logic/compute.js';
import { ErrorBox, Section } from '../../ui.js';

const NAME = /^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?$/;

/** Debounced copy of a value: the preview asks the API once typing pauses. */
function useDebounced<T>(value: T, ms: number): T {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    const timer = setTimeout(() => setSettled(value), ms);
    return () => clearTimeout(timer);
  }, [value, ms]);
  return settled;
}

export function CreateShard({ teamId, adminTeamId }: { teamId: string; adminTeamId?: string }) {
  const [name, setName] = useState('');
  const [image, setImage] = useState('gpushards/demo-probe:local');
  const [memory, setMemory] = useState('4g');
  const [gpuCount, setGpuCount] = useState(1);
  const [share, setShare] = useState('');
  const [mode, setMode] = useState<ComputeModeName>('GUARANTEED');
  const [elastic, setElastic] = useState(false);
  const [created, create] = useMutation(CreateShardDocument);
  const [done, setDone] = useState<string | null>(null);
  // The Elastic box only where the team's quota allows elastic shards (the Quota view above
  // reads the same team, so this is one request).
  const [team] = useQuery({ query: TeamDocument, variables: { id: adminTeamId ?? teamId } });
  const elasticAllowed = team.data?.team?.quotaPolicy?.allowElastic === true;

  const size = parseSizeInput(memory);
  const nameProblem =
    name !== '' && !NAME.test(name)
      ? 'a-z, 0-9, ".", "_" and "-", starting and ending with a letter or digit'
      : null;
  const shareProblem = computeProblem(share, mode);
  const parsedShare = parseSharePercent(share);
  // Only what the user chose is sent: no share means none (the default split).
  const compute =
    parsedShare.ok && parsedShare.percent !== null
      ? { computeSharePercent: parsedShare.percent, computeMode: mode }
      : {};
  const input = useDebounced(
    {
      memoryPerGpu: memory.trim(),
      gpuCount,
      ...compute,
      ...(adminTeamId ? { teamId: adminTeamId } : {}),
    },
    250,
  );
  const [preview] = useQuery({
    query: PreviewDocument,
    variables: { input },
    pause:
      !parseSizeInput(input.memoryPerGpu).ok || !(input.gpuCount >= 1) || shareProblem !== null,
    requestPolicy: 'network-only',
  });

  async function submit(event: FormEvent) {
    event.preventDefault();
    setDone(null);
    if (!size.ok || nameProblem || name === '' || shareProblem) return;
    const result = await create({
      input: {
        name,
        image,
        memoryPerGpu: memory.trim(),
        gpuCount,
        ...compute,
        ...(elastic && elasticAllowed ? { elastic: true } : {}),
        ...(adminTeamId ? { teamId: adminTeamId } : {}),
      },
    });
    if (result.data) {
      setDone(
        `Shard ${result.data.createShard.name} is ${result.data.createShard.state} on ${result.data.createShard.hostId ?? '—'}.`,
      );
      setName('');
      setShare('');
      setMode('GUARANTEED');
      setElastic(false);
    }
  }

  const p = preview.data?.placementPreview;
  return (
    <Section title="New shard">
      <form
        className="create"
        onSubmit={submit}
        // Any edit starts the next request: the last one's "… is PLACED on …" no longer applies.
        onChange={() => setDone(null)}
        aria-label="New shard"
        data-team={teamId}
      >
        <label>
          Name
          <input
            value={name}
            required
            placeholder="trainer-1"
            onChange={(e) => setName(e.target.value)}
            aria-invalid={nameProblem !== null}
          />
          {nameProblem && <span className="problem">{nameProblem}</span>}
        </label>
        <label>
          Image
          <input value={image} required onChange={(e) => setImage(e.target.value)} />
        </label>
        <label>
          Memory per GPU
          <input
            value={memory}
            required
            onChange={(e) => setMemory(e.target.value)}
            aria-invalid={!size.ok}
            aria-describedby="memory-help"
          />
          <span id="memory-help" className={size.ok ? 'muted small' : 'problem'}>
            {size.ok ? 'like 12g or 1536m (1024-based)' : size.message}
          </span>
        </label>
        <label>
          GPUs
          <input
            type="number"
            min={1}
            max={16}
            value={gpuCount}
            onChange={(e) => setGpuCount(Number(e.target.value))}
          />
        </label>
        <label>
          Compute share
          <input
            value={share}
            placeholder="none"
            inputMode="numeric"
            onChange={(e) => setShare(e.target.value)}
            aria-invalid={shareProblem !== null}
            aria-describedby="share-help"
          />
          <span id="share-help" className={shareProblem ? 'problem' : 'muted small'}>
            {shareProblem ?? '% of each GPU; blank: the default split'}
          </span>
        </label>
        <label>
          Compute mode
          <select
            value={mode}
            onChange={(e) => setMode(e.target.value as ComputeModeName)}
            aria-describedby="mode-help"
          >
            <option value="GUARANTEED">guaranteed (at least, and idle time)</option>
            <option value="CAPPED">capped (never more)</option>
            <option value="ISOLATED">isolated (an MPS partition of its own)</option>
          </select>
          <span id="mode-help" className="muted small" data-testid="mode-help">
            {COMPUTE_MODE_HINTS[mode]}
          </span>
        </label>
        {elasticAllowed && (
          <label>
            <input
              type="checkbox"
              checked={elastic}
              onChange={(e) => setElastic(e.target.checked)}
              aria-describedby="elastic-help"
            />
            Elastic
            <span id="elastic-help" className="muted small">
              while idle its GPU memory may wait in host RAM; it comes back when it computes
            </span>
          </label>
        )}
        <button
          type="submit"
          disabled={created.fetching || !size.ok || nameProblem !== null || shareProblem !== null}
        >
          {created.fetching ? 'Creating…' : 'Create'}
        </button>
      </form>
      <div className="preview" aria-live="polite" data-testid="preview">
        {preview.fetching && !p && <span className="muted">Checking where it would go…</span>}
        {p && p.verdict === 'WAIT' && !p.quotaProblem && (
          <span className="problem">
            Would wait as PENDING{p.waitingAhead > 0 ? ` behind ${p.waitingAhead} shard(s)` : ''}:{' '}
            {p.message}
          </span>
        )}
        {p && p.fits && p.verdict !== 'WAIT' && !p.quotaProblem && (
          <span className="fits">
            Would go on <strong>{p.hostId}</strong>, reserving {p.reservedPerGpu?.human} per GPU
            {parsedShare.ok && parsedShare.percent !== null
              ? ` and ${shareLabel(parsedShare.percent, mode)} of its compute`
              : ''}
            .
          </span>
        )}
        {p?.quotaProblem && (
          <span className="problem">Quota would refuse it: {p.quotaProblem}</span>
        )}
        {p && !p.fits && p.verdict !== 'WAIT' && (
          <div className="problem">
            {p.message}
            <ul>
              {p.hosts.map((h) => (
                <li key={h.hostId}>
                  {h.hostId}: {h.reason}
                </li>
              ))}
            </ul>
          </div>
        )}
        <ErrorBox error={preview.error} />
      </div>
      <ErrorBox error={created.error} />
      {done && (
        <p className="ok" role="status">
          {done}
        </p>
      )}
    </Section>
  );
}

import { useState, type FormEvent } from 'react';
import { useMutation, useQuery, useSubscription } from 'urql';
import {
  DeleteShardDocument,
  ResizeShardDocument,
  ResumeShardDocument,
  SetShardComputeDocument,
  ShardEventsDocument,
  ShardNoticesDocument,
  ShardsDocument,
  StartShardDocument,
  StopShardDocument,
  SuspendShardDocument,
  type ShardFieldsFragment,
} from '@gpushards/graphql-client';
import {
  age,
  canDelete,
  canResize,
  canSetCompute,
  canStart,
  canStop,
  humanBytes,
  parseSizeInput,
} from '../../logic/format.js';
import {
  MAX_NOTICES,
  mergeShards,
  NOTICE_KINDS,
  realBytes,
  shardNotices,
  usedBytes,
  type NoticeEvent,
} from '../../logic/shards.js';
import {
  busyRatio,
  computeProblem,
  idleSince,
  parseSharePercent,
  shareLabel,
  type ComputeModeName,
} from '../../logic/compute.js';
import { canResume, canSuspend, withProgress } from '../../logic/elastic.js';
import { useMoveProgress } from './useMoveProgress.js';
import { ShardState } from './ShardState.js';
import { Empty, ErrorBox, Loading, Section } from '../../ui.js';

type Shard = ShardFieldsFragment;

/**
 * The team's shards, kept live by shardEvents: no reload needed to see a state change. The
 * notices above them are the team's stored ones (teamShardEvents, read on mount, so a reload
 * loses none) and those heard live since, each once.
 */
export function Shards({ teamId, canWrite }: { teamId: string; canWrite: boolean }) {
  const [listed, refetchListed] = useQuery({
    query: ShardsDocument,
    variables: { first: 50, teamId },
  });
  // A resize (memory or compute) changes no state, so no event may come: the list is read again
  // (its newer version wins in mergeShards).
  const refetch = () => refetchListed({ requestPolicy: 'network-only' });
  const [events] = useSubscription(
    { query: ShardEventsDocument, variables: { teamId } },
    (
      previous: { shards: Shard[]; notices: NoticeEvent[] } = { shards: [], notices: [] },
      event,
    ) => {
      const { shard } = event.shardEvents;
      const notice = event.shardEvents;
      return {
        shards: [...previous.shards, shard],
        notices: shardNotices([notice]).length ? [...previous.notices, notice] : previous.notices,
      };
    },
  );
  const merged = mergeShards(
    listed.data?.shards.edges.map((e) => e.node) ?? [],
    events.data?.shards ?? [],
  );
  const progress = useMoveProgress(merged);
  const rows = merged.map((row) => withProgress(row, progress.get(row.id)));
  const [stored] = useQuery({
    query: ShardNoticesDocument,
    variables: { teamId, first: MAX_NOTICES, kinds: [...NOTICE_KINDS] },
  });
  const notices = shardNotices([
    ...(stored.data?.teamShardEvents.edges.map((e) => e.node) ?? []),
    ...(events.data?.notices ?? []),
  ]);
  return (
    <Section title="Shards">
      {listed.fetching && !listed.data && <Loading what="shards" />}
      <ErrorBox error={listed.error} />
      <ErrorBox error={events.error} />
      <ErrorBox error={stored.error} />
      {notices.length > 0 && (
        <ul className="notices" aria-label="Shard notices">
          {notices.map((n) => (
            <li key={n.key}>
              <time dateTime={n.at}>{n.at}</time> <strong>{n.shardName}</strong>: {n.text}
            </li>
          ))}
        </ul>
      )}
      {listed.data && rows.length === 0 && <Empty>No shards yet. Create one above.</Empty>}
      {rows.length > 0 && (
        <table className="shards">
          <thead>
            <tr>
              <th scope="col">name</th>
              <th scope="col">state</th>
              <th scope="col">host</th>
              <th scope="col">GPUs</th>
              <th scope="col">cap / GPU</th>
              <th scope="col">used</th>
              <th scope="col" title="measured by the host's agent through NVML">
                real
              </th>
              <th scope="col" title="compute share of each GPU (docs/compute.md)">
                compute
              </th>
              <th
                scope="col"
                title="share of time it held its GPUs between the last two heartbeats"
              >
                busy
              </th>
              <th scope="col" title="time since its last kernel on any GPU (its start if none)">
                idle for
              </th>
              <th scope="col">age</th>
              {canWrite && <th scope="col">actions</th>}
            </tr>
          </thead>
          <tbody>
            {rows.map((shard) => (
              <ShardRow key={shard.id} shard={shard} canWrite={canWrite} onResized={refetch} />
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}

function ShardRow(props: { shard: Shard; canWrite: boolean; onResized: () => void }) {
  const { shard, canWrite } = props;
  const [stop, doStop] = useMutation(StopShardDocument);
  const [start, doStart] = useMutation(StartShardDocument);
  const [remove, doRemove] = useMutation(DeleteShardDocument);
  const [suspend, doSuspend] = useMutation(SuspendShardDocument);
  const [resume, doResume] = useMutation(ResumeShardDocument);
  const [resize, doResize] = useMutation(ResizeShardDocument);
  const [setCompute, doSetCompute] = useMutation(SetShardComputeDocument);
  const [resizing, setResizing] = useState(false);
  const [size, setSize] = useState('');
  const [sizeProblem, setSizeProblem] = useState<string | null>(null);
  const [computing, setComputing] = useState(false);
  const [share, setShare] = useState('');
  const [mode, setMode] = useState<ComputeModeName>(shard.computeMode);
  const [shareProblem, setShareProblem] = useState<string | null>(null);
  const live = shard.gpus.filter((g) => g.releasedAt === null);
  const busy = busyRatio(shard.gpus);
  const quietSince = shard.state === 'RUNNING' ? idleSince(shard) : null;

  async function submitCompute(event: FormEvent) {
    event.preventDefault();
    const problem = computeProblem(share, mode);
    const parsed = parseSharePercent(share);
    if (problem !== null || !parsed.ok) {
      setShareProblem(problem);
      return;
    }
    setShareProblem(null);
    const result = await doSetCompute({ id: shard.id, percent: parsed.percent, mode });
    if (!result.error) {
      setComputing(false);
      props.onResized();
    }
  }

  async function submitResize(event: FormEvent) {
    event.preventDefault();
    const parsed = parseSizeInput(size);
    if (!parsed.ok) {
      setSizeProblem(parsed.message);
      return;
    }
    setSizeProblem(null);
    const result = await doResize({ id: shard.id, memoryPerGpu: size.trim() });
    if (!result.error) {
      setResizing(false);
      props.onResized();
    }
  }

  return (
    <>
      <tr
        data-shard={shard.name}
        data-state={shard.state}
        data-memory={shard.memoryPerGpu.human}
        data-compute={shareLabel(shard.computeSharePercent, shard.computeMode)}
      >
        <td>
          <span title={shard.image}>{shard.name}</span>
          {shard.elastic && (
            <span
              className="tag"
              title="elastic: while idle its GPU memory may wait in host RAM (docs/elastic.md)"
            >
              elastic
            </span>
          )}
        </td>
        <td>
          <ShardState shard={shard} />
        </td>
        <td>{shard.hostId ?? '—'}</td>
        <td>{live.length > 0 ? live.map((g) => g.index).join(', ') : `${shard.gpuCount} ×`}</td>
        <td>{shard.limitPerGpu.human}</td>
        <td>{humanBytes(usedBytes(shard.gpus))}</td>
        <td>{realBytes(shard.gpus) === null ? '—' : humanBytes(realBytes(shard.gpus)!)}</td>
        <td>{shareLabel(shard.computeSharePercent, shard.computeMode)}</td>
        <td>{busy === null ? '—' : `${Math.round(busy * 100)}%`}</td>
        <td>
          {quietSince === null ? '—' : age(quietSince)}
          {shard.idleSince && (
            <span className="idle-flag" title="its team's idle policy reports it idle">
              {' '}
              idle
            </span>
          )}
        </td>
        <td>{age(shard.createdAt)}</td>
        {canWrite && (
          <td className="actions">
            <button
              disabled={!canStop(shard.state) || stop.fetching}
              onClick={() => void doStop({ id: shard.id })}
            >
              Stop
            </button>
            {canStart(shard.state) && (
              <button disabled={start.fetching} onClick={() => void doStart({ id: shard.id })}>
                Start
              </button>
            )}
            {canSuspend(shard.state) && (
              <button
                disabled={suspend.fetching}
                title="move its GPU memory to host RAM; its processes wait at their next GPU call"
                onClick={() => void doSuspend({ id: shard.id })}
              >
                Suspend
              </button>
            )}
            {canResume(shard.state) && (
              <button
                disabled={resume.fetching || shard.memory.resumeWantedAt !== null}
                onClick={() => void doResume({ id: shard.id })}
              >
                Resume
              </button>
            )}
            <button
              disabled={!canResize(shard.state)}
              onClick={() => setResizing(!resizing)}
              aria-expanded={resizing}
            >
              Resize
            </button>
            <button
              disabled={!canSetCompute(shard.state)}
              onClick={() => {
                setShare(
                  shard.computeSharePercent === null ? '' : String(shard.computeSharePercent),
                );
                setMode(shard.computeMode);
                setComputing(!computing);
              }}
              aria-expanded={computing}
            >
              Compute
            </button>
            <button
              className="danger"
              disabled={!canDelete(shard.state) || remove.fetching}
              onClick={() => {
                if (window.confirm(`Delete shard ${shard.name}? Its container is removed.`)) {
                  void doRemove({ id: shard.id });
                }
              }}
            >
              Delete
            </button>
          </td>
        )}
      </tr>
      {(resizing ||
        computing ||
        stop.error ||
        suspend.error ||
        resume.error ||
        start.error ||
        remove.error ||
        resize.error ||
        setCompute.error) && (
        <tr className="detail">
          <td colSpan={12}>
            {resizing && (
              <form className="row" onSubmit={submitResize} aria-label={`Resize ${shard.name}`}>
                <label>
                  New memory per GPU (now {shard.memoryPerGpu.human})
                  <input
                    autoFocus
                    value={size}
                    placeholder="12g"
                    onChange={(e) => setSize(e.target.value)}
                  />
                </label>
                <button type="submit" disabled={resize.fetching}>
                  Apply
                </button>
                {sizeProblem && <span className="problem">{sizeProblem}</span>}
              </form>
            )}
            {computing && (
              <form
                className="row"
                onSubmit={submitCompute}
                aria-label={`Compute share of ${shard.name}`}
              >
                <label>
                  New compute share, % of each GPU (now{' '}
                  {shareLabel(shard.computeSharePercent, shard.computeMode)})
                  <input
                    autoFocus
                    value={share}
                    placeholder="none"
                    inputMode="numeric"
                    onChange={(e) => setShare(e.target.value)}
                  />
                </label>
                <label>
                  Mode
                  <select value={mode} onChange={(e) => setMode(e.target.value as ComputeModeName)}>
                    <option value="GUARANTEED">guaranteed</option>
                    <option value="CAPPED">capped</option>
                    {/* The API refuses a new share for a shard that holds GPUs in this mode. */}
                    <option value="ISOLATED">isolated (not while it holds GPUs)</option>
                  </select>
                </label>
                <button type="submit" disabled={setCompute.fetching}>
                  Apply
                </button>
                {shareProblem && <span className="problem">{shareProblem}</span>}
              </form>
            )}
            <ErrorBox
              error={
                stop.error ??
                start.error ??
                suspend.error ??
                resume.error ??
                remove.error ??
                resize.error ??
                setCompute.error
              }
            />
          </td>
        </tr>
      )}
    </>
  );
}

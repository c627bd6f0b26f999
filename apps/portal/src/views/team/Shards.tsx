import { useState, type FormEvent } from 'react';
import { useMutation, useQuery, useSubscription } from 'urql';
import { readFragment, type ResultOf } from 'gql.tada';
import {
  DeleteShardMutation,
  ResizeShardMutation,
  ShardEventsSubscription,
  ShardFields,
  ShardsQuery,
  StopShardMutation,
} from '../../queries.js';
import {
  age,
  canDelete,
  canResize,
  canStop,
  humanBytes,
  parseSizeInput,
} from '../../logic/format.js';
import { mergeShards, realBytes, usedBytes } from '../../logic/shards.js';
import { Empty, ErrorBox, Loading, Section } from '../../ui.js';

type Shard = ResultOf<typeof ShardFields>;

/** The team's shards, kept live by shardEvents: no reload needed to see a state change. */
export function Shards({ teamId, canWrite }: { teamId: string; canWrite: boolean }) {
  const [listed, refetchListed] = useQuery({
    query: ShardsQuery,
    variables: { first: 50, teamId },
  });
  // A resize changes no state, so no event may come: the list is read again (its newer version
  // wins in mergeShards).
  const refetch = () => refetchListed({ requestPolicy: 'network-only' });
  const [events] = useSubscription(
    { query: ShardEventsSubscription, variables: { teamId } },
    (previous: Shard[] = [], event) => [
      ...previous,
      readFragment(ShardFields, event.shardEvents.shard),
    ],
  );
  const rows = mergeShards(
    listed.data?.shards.edges.map((e) => readFragment(ShardFields, e.node)) ?? [],
    events.data ?? [],
  );
  return (
    <Section title="Shards">
      {listed.fetching && !listed.data && <Loading what="shards" />}
      <ErrorBox error={listed.error} />
      <ErrorBox error={events.error} />
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
  const [stop, doStop] = useMutation(StopShardMutation);
  const [remove, doRemove] = useMutation(DeleteShardMutation);
  const [resize, doResize] = useMutation(ResizeShardMutation);
  const [resizing, setResizing] = useState(false);
  const [size, setSize] = useState('');
  const [sizeProblem, setSizeProblem] = useState<string | null>(null);
  const live = shard.gpus.filter((g) => g.releasedAt === null);

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
      <tr data-shard={shard.name} data-state={shard.state} data-memory={shard.memoryPerGpu.human}>
        <td>
          <span title={shard.image}>{shard.name}</span>
        </td>
        <td>
          <span className={`state state-${shard.state}`}>{shard.state}</span>
          {shard.failureReason && <div className="muted small">{shard.failureReason}</div>}
          {shard.exitCode !== null && <div className="muted small">exit {shard.exitCode}</div>}
        </td>
        <td>{shard.hostId ?? '—'}</td>
        <td>{live.length > 0 ? live.map((g) => g.index).join(', ') : `${shard.gpuCount} ×`}</td>
        <td>{shard.limitPerGpu.human}</td>
        <td>{humanBytes(usedBytes(shard.gpus))}</td>
        <td>{realBytes(shard.gpus) === null ? '—' : humanBytes(realBytes(shard.gpus)!)}</td>
        <td>{age(shard.createdAt)}</td>
        {canWrite && (
          <td className="actions">
            <button
              disabled={!canStop(shard.state) || stop.fetching}
              onClick={() => void doStop({ id: shard.id })}
            >
              Stop
            </button>
            <button
              disabled={!canResize(shard.state)}
              onClick={() => setResizing(!resizing)}
              aria-expanded={resizing}
            >
              Resize
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
      {(resizing || stop.error || remove.error || resize.error) && (
        <tr className="detail">
          <td colSpan={9}>
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
            <ErrorBox error={stop.error ?? remove.error ?? resize.error} />
          </td>
        </tr>
      )}
    </>
  );
}

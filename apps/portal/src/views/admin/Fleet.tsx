import { useMutation, useQuery, useSubscription } from 'urql';
import {
  FleetShardsDocument,
  CordonDocument,
  DrainDocument,
  RemoveHostDocument,
  UncordonDocument,
  HostsDocument,
  IdleShardsDocument,
  ShardEventsDocument,
  type ResultOf,
} from '@gpushards/graphql-client';
import { gpuComputeLabel } from '../../logic/compute.js';
import { IdleShards } from './IdleShards.js';
import { OvercommitForm, overcommitNote } from './Overcommit.js';
import { bytesOf, humanBytes, LIVE_STATES } from '../../logic/format.js';
import { gpuSegments, teamColor, type FleetShard } from '../../logic/fleet.js';
import { Empty, ErrorBox, Loading, Section } from '../../ui.js';

type Host = ResultOf<typeof HostsDocument>['hosts']['edges'][number]['node'];
type FleetShardRow = ResultOf<typeof FleetShardsDocument>['shards']['edges'][number]['node'];

/** Hosts × GPUs, each GPU's reservations as a bar split by team; refreshed on shard events. */
export function Fleet() {
  const [hosts, refetchHosts] = useQuery({ query: HostsDocument, variables: { first: 100 } });
  const [shards, refetchShards] = useQuery({
    query: FleetShardsDocument,
    // Suspended shards stay on their host (their memory in its RAM): listed, with no bar.
    variables: {
      first: 200,
      states: [
        ...LIVE_STATES.filter((s) => s !== 'PENDING'),
        'SUSPENDING',
        'SUSPENDED',
        'RESUMING',
      ] as never,
    },
  });
  const [idle, refetchIdle] = useQuery({ query: IdleShardsDocument, variables: { first: 100 } });
  useSubscription({ query: ShardEventsDocument, variables: {} }, (n: number = 0) => {
    refetchHosts({ requestPolicy: 'network-only' });
    refetchShards({ requestPolicy: 'network-only' });
    refetchIdle({ requestPolicy: 'network-only' });
    return n + 1;
  });
  const rows = shards.data?.shards.edges.map((e) => e.node) ?? [];
  const fleetShards: FleetShard[] = rows.map((s) => ({
    team: s.team.name,
    gpus: s.gpus.map((g) => ({
      gpuUuid: g.gpuUuid,
      reservedBytes: bytesOf(g.reserved.bytes),
      released: g.releasedAt !== null,
    })),
  }));
  const teams = [...new Set(fleetShards.map((s) => s.team))].sort();
  return (
    <div>
      <h1>Fleet</h1>
      {hosts.fetching && !hosts.data && <Loading what="hosts" />}
      <ErrorBox error={hosts.error ?? shards.error} />
      {hosts.data && hosts.data.hosts.edges.length === 0 && (
        <Empty>
          No host has registered yet. Start an agent (npm start runs one for this machine).
        </Empty>
      )}
      {teams.length > 0 && (
        <p className="legend" aria-label="Teams">
          {teams.map((t) => (
            <span key={t}>
              <i style={{ background: teamColor(t) }} /> {t}
            </span>
          ))}
          <span>
            <i className="free-swatch" /> free
          </span>
        </p>
      )}
      {hosts.data?.hosts.edges.map(({ node }) => (
        <HostCard
          key={node.id}
          host={node}
          shards={fleetShards}
          rows={rows.filter((r) => r.hostId === node.id)}
          onRemoved={() => refetchHosts({ requestPolicy: 'network-only' })}
        />
      ))}
      <IdleShards result={idle} />
    </div>
  );
}

function HostCard({
  host,
  shards,
  rows,
  onRemoved,
}: {
  host: Host;
  shards: FleetShard[];
  rows: FleetShardRow[];
  onRemoved: () => void;
}) {
  const [cordon, doCordon] = useMutation(CordonDocument);
  const [uncordon, doUncordon] = useMutation(UncordonDocument);
  const [drain, doDrain] = useMutation(DrainDocument);
  const [removed, doRemove] = useMutation(RemoveHostDocument);
  return (
    <Section
      title={`Host ${host.name}`}
      actions={
        <div className="row">
          <span className={`state host-${host.state}`} data-testid="host-state">
            {host.state}
            {host.cordoned && host.state !== 'CORDONED' ? ' · cordoned' : ''}
          </span>
          {host.simulated && <span className="muted small">simulated GPUs</span>}
          {host.computeIsolatedPoolPercent > 0 && (
            <span className="muted small" data-testid="isolated-pool">
              MPS partition {host.computeIsolatedPoolPercent}% for isolated shards
            </span>
          )}
          {host.cordoned ? (
            <button onClick={() => void doUncordon({ id: host.id })}>Uncordon</button>
          ) : (
            <button onClick={() => void doCordon({ id: host.id })}>Cordon</button>
          )}
          <button
            className="danger"
            disabled={host.state === 'DRAINING'}
            onClick={() => {
              if (window.confirm(`Drain ${host.name}? Every shard on it is stopped.`))
                void doDrain({ id: host.id });
            }}
          >
            Drain
          </button>
          {(host.cordoned || host.state === 'OFFLINE') && (
            <button
              className="danger"
              disabled={removed.fetching}
              onClick={() => {
                if (
                  window.confirm(
                    `Remove ${host.name} for good? Its agent is refused from now on; its history stays.`,
                  )
                )
                  void doRemove({ id: host.id }).then((r) => r.data && onRemoved());
              }}
            >
              Remove
            </button>
          )}
        </div>
      }
    >
      <ErrorBox error={cordon.error ?? uncordon.error ?? drain.error ?? removed.error} />
      <p className="muted small">
        {host.id} · {host.memory.reserved.human} reserved of {host.memory.total.human},{' '}
        {host.memory.free.human} free ·{' '}
        <span data-testid="host-suspend-budget">
          {Number(host.memory.suspendBudget.bytes) > 0
            ? `host RAM for suspended shards: ${host.memory.suspended.human} of ${host.memory.suspendBudget.human}`
            : `suspends no shards${host.memory.suspendUnavailableReason ? ` (${host.memory.suspendUnavailableReason})` : ''}`}
        </span>
      </p>
      <OvercommitForm
        hostId={host.id}
        hostName={host.name}
        // The host's ratio where its GPUs agree (set per host); else the largest, to edit from.
        ratio={Math.max(1, ...host.gpus.map((g) => g.overcommitRatio))}
      />
      <div className="gpus">
        {host.gpus.map((gpu) => {
          const segments = gpuSegments(
            {
              uuid: gpu.uuid,
              capacityBytes: bytesOf(gpu.capacity.bytes),
              reservedBytes: bytesOf(gpu.reserved.bytes),
            },
            shards,
          );
          return (
            <div className="gpu" key={gpu.uuid}>
              <div className="gpu-label">
                GPU {gpu.index} · {gpu.model} · {gpu.reserved.human} reserved / {gpu.capacity.human}
                , used {gpu.used.human} ·{' '}
                <span data-testid="gpu-compute">{gpuComputeLabel(gpu)}</span>
                {overcommitNote(gpu.overcommitRatio) !== null && (
                  <span data-testid="gpu-overcommit">
                    {' '}
                    · {overcommitNote(gpu.overcommitRatio)}
                    {Number(gpu.suspended.bytes) > 0 && `, ${gpu.suspended.human} suspended`}
                  </span>
                )}
                {gpu.missingSince && <span className="problem"> missing</span>}
              </div>
              <div
                className="bar"
                role="img"
                aria-label={segments
                  .map((s) => `${s.team ?? 'free'} ${humanBytes(s.bytes)}`)
                  .join(', ')}
              >
                {segments.map((s) => (
                  <div
                    key={s.team ?? 'free'}
                    className={s.team === null ? 'seg free' : 'seg'}
                    title={`${s.team ?? 'free'}: ${humanBytes(s.bytes)}`}
                    style={{
                      width: `${s.fraction * 100}%`,
                      background: s.team === null ? undefined : teamColor(s.team),
                    }}
                  />
                ))}
              </div>
            </div>
          );
        })}
      </div>
      {rows.length > 0 && (
        <ul className="host-shards">
          {rows.map((r) => (
            <li key={r.id} data-shard={r.name} data-state={r.state}>
              <i style={{ background: teamColor(r.team.name) }} /> {r.team.name}/{r.name} ·{' '}
              {r.state}
            </li>
          ))}
        </ul>
      )}
    </Section>
  );
}

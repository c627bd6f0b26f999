import { useState, type FormEvent } from 'react';
import { useMutation, useQuery } from 'urql';
import { formatDuration, parseDuration } from '@gpushards/limits';
import {
  ArchiveTeamDocument,
  CreateTeamDocument,
  DeleteTeamDocument,
  RenameTeamDocument,
  UnarchiveTeamDocument,
  type TeamFieldsFragment,
  SetIdlePolicyDocument,
  SetQuotaDocument,
  TeamsDocument,
} from '@gpushards/graphql-client';
import { parseSizeInput } from '../../logic/format.js';
import { Empty, ErrorBox, Loading, Section } from '../../ui.js';

export function Teams() {
  const [teams] = useQuery({ query: TeamsDocument, variables: { first: 100 } });
  const [created, createTeam] = useMutation(CreateTeamDocument);
  const [name, setName] = useState('');
  const [editing, setEditing] = useState<string | null>(null);
  const [editingIdle, setEditingIdle] = useState<string | null>(null);
  const [managing, setManaging] = useState<string | null>(null);
  return (
    <div>
      <h1>Teams</h1>
      <Section title="New team">
        <form
          className="row"
          aria-label="New team"
          onSubmit={(e) => {
            e.preventDefault();
            void createTeam({ name: name.trim() }).then((r) => r.data && setName(''));
          }}
        >
          <label>
            Name{' '}
            <input
              value={name}
              required
              placeholder="ml-research"
              onChange={(e) => setName(e.target.value)}
            />
          </label>
          <button type="submit" disabled={created.fetching}>
            Create team
          </button>
        </form>
        <ErrorBox error={created.error} />
      </Section>
      <Section title="Teams and quota policies">
        {teams.fetching && !teams.data && <Loading what="teams" />}
        <ErrorBox error={teams.error} />
        {teams.data?.teams.edges.length === 0 && <Empty>No team yet.</Empty>}
        {teams.data && teams.data.teams.edges.length > 0 && (
          <table>
            <thead>
              <tr>
                <th scope="col">team</th>
                <th scope="col">holds</th>
                <th scope="col">max total</th>
                <th scope="col">max per shard</th>
                <th scope="col">max shards</th>
                <th scope="col">priority</th>
                <th scope="col">compute / shard</th>
                <th scope="col">idle policy</th>
                <th scope="col" />
              </tr>
            </thead>
            <tbody>
              {teams.data.teams.edges.map(({ node }) => (
                <tr key={node.id} data-team={node.name} data-archived={node.archivedAt !== null}>
                  <td>
                    {node.name}
                    {node.archivedAt !== null && <span className="muted small"> archived</span>}
                  </td>
                  <td>
                    {node.usage.reserved.human} in {node.usage.shardCount} shard(s)
                  </td>
                  <td>{node.quotaPolicy?.maxTotal.human ?? 'no policy'}</td>
                  <td>{node.quotaPolicy?.maxPerShard.human ?? '—'}</td>
                  <td>{node.quotaPolicy?.maxShards ?? '—'}</td>
                  <td>{node.quotaPolicy?.priority ?? '—'}</td>
                  <td>
                    {!node.quotaPolicy
                      ? '—'
                      : node.quotaPolicy.maxComputeSharePercent === 0
                        ? 'no shares'
                        : `up to ${node.quotaPolicy.maxComputeSharePercent ?? 100}%`}
                  </td>
                  <td>
                    {node.idlePolicy
                      ? `report after ${formatDuration(node.idlePolicy.idleAfterSeconds)}${
                          node.idlePolicy.stopAfterSeconds === null
                            ? ''
                            : `, stop after ${formatDuration(node.idlePolicy.stopAfterSeconds)}`
                        }`
                      : 'none'}
                  </td>
                  <td className="actions">
                    <button
                      onClick={() => {
                        setEditingIdle(null);
                        setEditing(editing === node.id ? null : node.id);
                      }}
                    >
                      Set quota
                    </button>
                    <button
                      onClick={() => {
                        setEditing(null);
                        setEditingIdle(editingIdle === node.id ? null : node.id);
                      }}
                    >
                      Idle policy
                    </button>
                    <button onClick={() => setManaging(managing === node.id ? null : node.id)}>
                      Manage
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        {managing && teams.data && (
          <TeamLifecycle
            team={teams.data.teams.edges.find((e) => e.node.id === managing)?.node ?? null}
            onDone={() => setManaging(null)}
          />
        )}
        {editing && <QuotaForm teamId={editing} onDone={() => setEditing(null)} />}
        {editingIdle && (
          <IdlePolicyForm
            teamId={editingIdle}
            teamName={
              teams.data?.teams.edges.find((e) => e.node.id === editingIdle)?.node.name ?? ''
            }
            onDone={() => setEditingIdle(null)}
          />
        )}
      </Section>
    </div>
  );
}

function QuotaForm({ teamId, onDone }: { teamId: string; onDone: () => void }) {
  const [saved, save] = useMutation(SetQuotaDocument);
  const [maxTotal, setMaxTotal] = useState('16g');
  const [maxPerShard, setMaxPerShard] = useState('8g');
  const [maxShards, setMaxShards] = useState(4);
  const [priority, setPriority] = useState(0);
  const [maxCompute, setMaxCompute] = useState('');
  // Left untouched, the team keeps its setting (the form does not read the team's policy).
  const [allowElastic, setAllowElastic] = useState<boolean | undefined>(undefined);
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
        ...(allowElastic === undefined ? {} : { allowElastic }),
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
          checked={allowElastic ?? false}
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

/** setTeamIdlePolicy: report a shard with no kernel after a time, and optionally stop it. */
function IdlePolicyForm(props: { teamId: string; teamName: string; onDone: () => void }) {
  const [saved, save] = useMutation(SetIdlePolicyDocument);
  const [after, setAfter] = useState('30m');
  const [stopAfter, setStopAfter] = useState('');
  const reportAt = after.trim() === '' ? null : parseDuration(after);
  const stopAt = stopAfter.trim() === '' ? null : parseDuration(stopAfter);
  const problem =
    reportAt && !reportAt.ok
      ? reportAt.message
      : stopAt && !stopAt.ok
        ? stopAt.message
        : reportAt === null && stopAt !== null
          ? 'stopping needs a time to report first'
          : null;
  async function submit(event: FormEvent) {
    event.preventDefault();
    if (problem) return;
    const result = await save({
      teamId: props.teamId,
      idleAfterSeconds: reportAt?.ok ? reportAt.seconds : null,
      stopAfterSeconds: stopAt?.ok ? stopAt.seconds : null,
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
      <span className="muted small">like 30m or 2h; blank report time: no policy</span>
      <button type="submit" disabled={saved.fetching || problem !== null}>
        Save idle policy
      </button>
      {problem && <span className="problem">{problem}</span>}
      <ErrorBox error={saved.error} />
    </form>
  );
}

/**
 * A team's life (admins): rename; archive (no new shards, its tokens refused) and back; delete,
 * refused while it has live shards unless they are drained first (then delete again once they
 * stopped).
 */
function TeamLifecycle({ team, onDone }: { team: TeamFieldsFragment | null; onDone: () => void }) {
  const [renamed, rename] = useMutation(RenameTeamDocument);
  const [archived, archive] = useMutation(ArchiveTeamDocument);
  const [unarchived, unarchive] = useMutation(UnarchiveTeamDocument);
  const [deleted, remove] = useMutation(DeleteTeamDocument);
  const [name, setName] = useState(team?.name ?? '');
  if (team === null) return null;
  const deletion = deleted.data?.deleteTeam;
  const deleteTeam = (drainFirst: boolean) => {
    const what = drainFirst
      ? `Stop every shard of ${team.name} and delete the team? Its usage and history are kept.`
      : `Delete team ${team.name}? Its tokens are revoked; its usage and history are kept.`;
    if (window.confirm(what)) void remove({ id: team.id, drainFirst });
  };
  return (
    <div className="form" aria-label={`Manage ${team.name}`} role="group">
      <h3>Team {team.name}</h3>
      <form
        className="row"
        aria-label={`Rename ${team.name}`}
        onSubmit={(e: FormEvent) => {
          e.preventDefault();
          void rename({ id: team.id, name: name.trim() });
        }}
      >
        <label>
          New name <input value={name} required onChange={(e) => setName(e.target.value)} />
        </label>
        <button type="submit" disabled={renamed.fetching}>
          Rename
        </button>
      </form>
      <div className="row">
        {team.archivedAt === null ? (
          <button disabled={archived.fetching} onClick={() => void archive({ id: team.id })}>
            Archive
          </button>
        ) : (
          <button disabled={unarchived.fetching} onClick={() => void unarchive({ id: team.id })}>
            Unarchive
          </button>
        )}
        <button className="danger" disabled={deleted.fetching} onClick={() => deleteTeam(false)}>
          Delete
        </button>
        <button className="danger" disabled={deleted.fetching} onClick={() => deleteTeam(true)}>
          Drain and delete
        </button>
        <button type="button" onClick={onDone}>
          Close
        </button>
      </div>
      {deletion && (
        <p role="status">
          {deletion.deleted
            ? `Team ${deletion.name} deleted.`
            : `${deletion.stoppingShards} shard(s) of ${deletion.name} stopping; the team is archived. Press "Drain and delete" again once they stopped.`}
        </p>
      )}
      <ErrorBox error={renamed.error ?? archived.error ?? unarchived.error ?? deleted.error} />
    </div>
  );
}

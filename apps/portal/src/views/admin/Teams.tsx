import { useState, type FormEvent } from 'react';
import { useMutation, useQuery } from 'urql';
import { formatDuration } from '@gpushards/limits';
import {
  ArchiveTeamDocument,
  CreateTeamDocument,
  DeleteTeamDocument,
  RenameTeamDocument,
  UnarchiveTeamDocument,
  type TeamFieldsFragment,
  TeamsDocument,
} from '@gpushards/graphql-client';
import { Empty, ErrorBox, Loading, Section } from '../../ui.js';
import { IdlePolicyForm, QuotaForm } from './TeamPolicies.js';

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
                <th scope="col" title="its shards may be elastic (docs/elastic.md)">
                  elastic
                </th>
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
                        }${
                          node.idlePolicy.suspendAfterSeconds === null
                            ? ''
                            : `, suspend elastic after ${formatDuration(node.idlePolicy.suspendAfterSeconds)}`
                        }`
                      : 'none'}
                  </td>
                  <td>{!node.quotaPolicy ? '—' : node.quotaPolicy.allowElastic ? 'yes' : 'no'}</td>
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
        {editing && (
          <QuotaForm
            key={editing}
            teamId={editing}
            current={teams.data?.teams.edges.find((e) => e.node.id === editing)?.node.quotaPolicy}
            onDone={() => setEditing(null)}
          />
        )}
        {editingIdle && (
          <IdlePolicyForm
            key={editingIdle}
            teamId={editingIdle}
            current={
              teams.data?.teams.edges.find((e) => e.node.id === editingIdle)?.node.idlePolicy
            }
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

import { useState, type FormEvent } from 'react';
import { useMutation, useQuery } from 'urql';
import {
  GroupMappingsDocument,
  RemoveGroupMappingDocument,
  SetGroupMappingDocument,
  TeamNamesDocument,
  type Role,
} from '@gpushards/graphql-client';
import { Empty, ErrorBox, Loading, Section } from '../../ui.js';

/**
 * Which provider groups give which team and role at sign-in (admins). A change counts at each
 * person's next sign-in.
 */
export function SignInMapping() {
  const [mappings, refetch] = useQuery({ query: GroupMappingsDocument });
  const [teams] = useQuery({ query: TeamNamesDocument, variables: { first: 500 } });
  const [saved, save] = useMutation(SetGroupMappingDocument);
  const [removed, remove] = useMutation(RemoveGroupMappingDocument);
  const [group, setGroup] = useState('');
  const [teamId, setTeamId] = useState('');
  const [role, setRole] = useState<Role>('MEMBER');
  const reload = () => refetch({ requestPolicy: 'network-only' });

  function submit(event: FormEvent) {
    event.preventDefault();
    void save({
      group: group.trim(),
      role,
      ...(role === 'ADMIN' || teamId === '' ? {} : { teamId }),
    }).then((r) => {
      if (r.data) {
        setGroup('');
        reload();
      }
    });
  }

  return (
    <div>
      <h1>Sign-in</h1>
      <Section title="Map a provider group">
        <form className="row" aria-label="Map a provider group" onSubmit={submit}>
          <label>
            Group{' '}
            <input
              value={group}
              required
              placeholder="ml-researchers"
              onChange={(e) => setGroup(e.target.value)}
            />
          </label>
          <label>
            Role{' '}
            <select value={role} onChange={(e) => setRole(e.target.value as Role)}>
              <option value="MEMBER">MEMBER</option>
              <option value="VIEWER">VIEWER</option>
              <option value="ADMIN">ADMIN (the fleet)</option>
            </select>
          </label>
          {role !== 'ADMIN' && (
            <label>
              Team{' '}
              <select value={teamId} required onChange={(e) => setTeamId(e.target.value)}>
                <option value="">choose…</option>
                {teams.data?.teams.edges.map(({ node }) => (
                  <option key={node.id} value={node.id}>
                    {node.name}
                  </option>
                ))}
              </select>
            </label>
          )}
          <button type="submit" disabled={saved.fetching}>
            Map
          </button>
        </form>
        <ErrorBox error={saved.error ?? removed.error} />
      </Section>
      <Section title="Group mapping">
        {mappings.fetching && !mappings.data && <Loading what="the group mapping" />}
        <ErrorBox error={mappings.error} />
        {mappings.data?.groupMappings.length === 0 && (
          <Empty>No group is mapped yet: people who sign in get no access.</Empty>
        )}
        {mappings.data && mappings.data.groupMappings.length > 0 && (
          <table>
            <thead>
              <tr>
                <th scope="col">provider group</th>
                <th scope="col">team</th>
                <th scope="col">role</th>
                <th scope="col" />
              </tr>
            </thead>
            <tbody>
              {mappings.data.groupMappings.map((m) => (
                <tr key={m.id} data-group={m.group}>
                  <td>{m.group}</td>
                  <td>{m.team?.name ?? 'the fleet'}</td>
                  <td>{m.role}</td>
                  <td className="actions">
                    <button
                      className="danger"
                      onClick={() =>
                        void remove({
                          group: m.group,
                          ...(m.team ? { teamId: m.team.id } : {}),
                        }).then(reload)
                      }
                    >
                      Remove
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Section>
    </div>
  );
}

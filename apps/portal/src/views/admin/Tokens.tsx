import { useState } from 'react';
import { useMutation, useQuery } from 'urql';
import {
  CreateTokenDocument,
  RevokeTokenDocument,
  TokensByTeamDocument,
  AdminTokensDocument,
} from '@gpushards/graphql-client';
import { age } from '../../logic/format.js';
import { Empty, ErrorBox, Loading, Section } from '../../ui.js';

export function Tokens() {
  // The fleet-wide (ADMIN) tokens and each team's own: two queries, one table.
  const [includeRevoked, setIncludeRevoked] = useState(false);
  const [admins, refetchAdmins] = useQuery({
    query: AdminTokensDocument,
    variables: { first: 500, includeRevoked },
  });
  const [teams, refetchTeams] = useQuery({
    query: TokensByTeamDocument,
    variables: { first: 100, includeRevoked },
  });
  const [created, create] = useMutation(CreateTokenDocument);
  const [revoked, revoke] = useMutation(RevokeTokenDocument);
  const refetch = () => {
    refetchAdmins({ requestPolicy: 'network-only' });
    refetchTeams({ requestPolicy: 'network-only' });
  };
  const rows =
    admins.data && teams.data
      ? [
          ...admins.data.adminApiTokens.edges.map((e) => e.node),
          ...teams.data.teams.edges.flatMap((t) => t.node.apiTokens.edges.map((e) => e.node)),
        ]
      : undefined;
  const [name, setName] = useState('');
  const [role, setRole] = useState<'ADMIN' | 'MEMBER' | 'VIEWER'>('MEMBER');
  const [teamId, setTeamId] = useState('');
  const [secret, setSecret] = useState<string | null>(null);
  return (
    <div>
      <h1>Tokens</h1>
      <Section title="New token">
        <form
          className="row"
          aria-label="New token"
          onSubmit={(e) => {
            e.preventDefault();
            setSecret(null);
            void create({ name, role, teamId: role === 'ADMIN' ? null : teamId || null }).then(
              (r) => {
                if (r.data) {
                  setSecret(r.data.createApiToken.secret);
                  setName('');
                  refetch();
                }
              },
            );
          }}
        >
          <label>
            Name{' '}
            <input
              value={name}
              required
              placeholder="ci runner"
              onChange={(e) => setName(e.target.value)}
            />
          </label>
          <label>
            Role
            <select value={role} onChange={(e) => setRole(e.target.value as typeof role)}>
              <option>MEMBER</option>
              <option>VIEWER</option>
              <option>ADMIN</option>
            </select>
          </label>
          {role !== 'ADMIN' && (
            <label>
              Team
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
          <button type="submit" disabled={created.fetching}>
            Create token
          </button>
        </form>
        <ErrorBox error={created.error} />
        {secret && (
          <div className="secret" role="status">
            <strong>Copy it now: it is shown only once.</strong>
            <code data-testid="secret">{secret}</code>
            <button onClick={() => void navigator.clipboard?.writeText(secret)}>Copy</button>
            <button onClick={() => setSecret(null)}>Done</button>
          </div>
        )}
      </Section>
      <Section
        title="Tokens"
        actions={
          <label className="check">
            <input
              type="checkbox"
              checked={includeRevoked}
              onChange={(e) => setIncludeRevoked(e.target.checked)}
            />{' '}
            Show revoked
          </label>
        }
      >
        {!rows && (admins.fetching || teams.fetching) && <Loading what="tokens" />}
        <ErrorBox error={admins.error ?? teams.error ?? revoked.error} />
        {rows?.length === 0 && <Empty>No token.</Empty>}
        {rows && rows.length > 0 && (
          <table>
            <thead>
              <tr>
                <th scope="col">name</th>
                <th scope="col">prefix</th>
                <th scope="col">role</th>
                <th scope="col">team</th>
                <th scope="col">created</th>
                <th scope="col">last used</th>
                <th scope="col" />
              </tr>
            </thead>
            <tbody>
              {rows.map((node) => (
                <tr
                  key={node.id}
                  data-token={node.name}
                  data-revoked={node.revokedAt ? 'yes' : undefined}
                >
                  <td>{node.name}</td>
                  <td>
                    <code>{node.prefix}</code>
                  </td>
                  <td>{node.role}</td>
                  <td>{node.team?.name ?? '—'}</td>
                  <td>{age(node.createdAt)} ago</td>
                  <td>{node.lastUsedAt ? `${age(node.lastUsedAt)} ago` : 'never'}</td>
                  <td>
                    {node.revokedAt ? (
                      <span className="muted">revoked {age(node.revokedAt)} ago</span>
                    ) : (
                      <button
                        className="danger"
                        onClick={() => {
                          if (window.confirm(`Revoke ${node.name}? Requests with it fail at once.`))
                            void revoke({ id: node.id }).then(refetch);
                        }}
                      >
                        Revoke
                      </button>
                    )}
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

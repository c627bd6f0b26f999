import { useState, type FormEvent } from 'react';
import { useMutation, useQuery } from 'urql';
import { CreateTeamMutation, SetQuotaMutation, TeamsQuery } from '../../queries.js';
import { parseSizeInput } from '../../logic/format.js';
import { Empty, ErrorBox, Loading, Section } from '../../ui.js';

export function Teams() {
  const [teams] = useQuery({ query: TeamsQuery, variables: { first: 100 } });
  const [created, createTeam] = useMutation(CreateTeamMutation);
  const [name, setName] = useState('');
  const [editing, setEditing] = useState<string | null>(null);
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
                <th scope="col" />
              </tr>
            </thead>
            <tbody>
              {teams.data.teams.edges.map(({ node }) => (
                <tr key={node.id} data-team={node.name}>
                  <td>{node.name}</td>
                  <td>
                    {node.usage.reserved.human} in {node.usage.shardCount} shard(s)
                  </td>
                  <td>{node.quotaPolicy?.maxTotal.human ?? 'no policy'}</td>
                  <td>{node.quotaPolicy?.maxPerShard.human ?? '—'}</td>
                  <td>{node.quotaPolicy?.maxShards ?? '—'}</td>
                  <td>{node.quotaPolicy?.priority ?? '—'}</td>
                  <td>
                    <button onClick={() => setEditing(editing === node.id ? null : node.id)}>
                      Set quota
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        {editing && <QuotaForm teamId={editing} onDone={() => setEditing(null)} />}
      </Section>
    </div>
  );
}

function QuotaForm({ teamId, onDone }: { teamId: string; onDone: () => void }) {
  const [saved, save] = useMutation(SetQuotaMutation);
  const [maxTotal, setMaxTotal] = useState('16g');
  const [maxPerShard, setMaxPerShard] = useState('8g');
  const [maxShards, setMaxShards] = useState(4);
  const [priority, setPriority] = useState(0);
  const problem = [maxTotal, maxPerShard].map((v) => parseSizeInput(v)).find((r) => !r.ok);
  async function submit(event: FormEvent) {
    event.preventDefault();
    if (problem) return;
    const result = await save({ teamId, input: { maxTotal, maxPerShard, maxShards, priority } });
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
      <button type="submit" disabled={saved.fetching || problem !== undefined}>
        Save quota
      </button>
      {problem && !problem.ok && <span className="problem">{problem.message}</span>}
      <ErrorBox error={saved.error} />
    </form>
  );
}

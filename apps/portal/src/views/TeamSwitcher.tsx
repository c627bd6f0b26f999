import { useMutation, useQuery } from 'urql';
import { SelectTeamDocument, SessionDocument } from '@gpushards/graphql-client';

/**
 * For a person signed in through the organisation's provider: the teams (and the fleet, for
 * admins) their groups give, to act as another one. Shown only when there is a choice.
 */
export function TeamSwitcher({
  current,
  onSwitched,
}: {
  current: string | null;
  onSwitched: () => void;
}) {
  const [session] = useQuery({ query: SessionDocument, requestPolicy: 'network-only' });
  const [switching, select] = useMutation(SelectTeamDocument);
  const memberships = session.data?.session?.memberships ?? [];
  if (memberships.length < 2) return null;
  return (
    <label className="switcher">
      Act as{' '}
      <select
        aria-label="Act as"
        value={current ?? ''}
        disabled={switching.fetching}
        onChange={(e) => {
          const teamId = e.target.value === '' ? null : e.target.value;
          void select({ teamId }).then((r) => r.data && onSwitched());
        }}
      >
        {memberships.map((m) => (
          <option key={m.team?.id ?? 'admin'} value={m.team?.id ?? ''}>
            {m.team ? `${m.team.name} (${m.role})` : 'the fleet (ADMIN)'}
          </option>
        ))}
      </select>
    </label>
  );
}

import { useEffect, useMemo, useState } from 'react';
import { Provider, useQuery } from 'urql';
import { createApiClient } from './client.js';
import { MeDocument } from '@gpushards/graphql-client';
import { clearToken, storedToken, storeToken } from './session.js';
import { ErrorBox, Loading } from './ui.js';
import { SignIn } from './views/SignIn.js';
import { TeamView } from './views/team/TeamView.js';
import { AdminView } from './views/admin/AdminView.js';

/** Hash routes: #/team, #/fleet, #/teams, #/tokens (the last three for admins). */
function useRoute(): string {
  const [route, setRoute] = useState(() => location.hash.replace(/^#\/?/, '') || '');
  useEffect(() => {
    const onChange = () => setRoute(location.hash.replace(/^#\/?/, ''));
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

export function App() {
  const [token, setToken] = useState<string | undefined>(() => storedToken());
  const api = useMemo(() => (token ? createApiClient(token) : undefined), [token]);
  useEffect(() => () => api?.close(), [api]);

  if (!token || !api) {
    return (
      <SignIn
        onSignIn={(value) => {
          storeToken(value);
          setToken(value);
        }}
      />
    );
  }
  const signOut = (problem?: string) => {
    clearToken();
    if (problem) sessionStorage.setItem('gpushards.portal.problem', problem);
    setToken(undefined);
  };
  return (
    <Provider value={api.client}>
      <Shell signOut={signOut} />
    </Provider>
  );
}

const ADMIN_ROUTES = ['fleet', 'teams', 'tokens'];

export function Shell({ signOut }: { signOut: (problem?: string) => void }) {
  const [me] = useQuery({ query: MeDocument, requestPolicy: 'network-only' });
  // urql asks for `me` again after every mutation that returns a team, and an answer with an
  // error carries no data: without the last good answer, one refused refetch (a timeout, a rate
  // limit) would unmount the page, and with it what the user was doing.
  const [known, setKnown] = useState(me.data);
  useEffect(() => {
    if (me.data) setKnown(me.data);
  }, [me.data]);
  const data = me.data ?? known;
  const route = useRoute();
  const refused = me.error?.graphQLErrors.some((e) => e.extensions?.['code'] === 'UNAUTHENTICATED');
  useEffect(() => {
    if (refused) signOut(me.error?.graphQLErrors[0]?.message ?? 'the token was refused');
  }, [refused]);

  if (me.fetching && !data) return <Loading what="your token" />;
  if (!data) {
    return (
      <main>
        <ErrorBox error={me.error} />
        <button onClick={() => signOut()}>Sign out</button>
      </main>
    );
  }
  const who = data.me;
  const isAdmin = who.role === 'ADMIN';
  const current = route || (isAdmin ? 'fleet' : 'team');
  const links = isAdmin
    ? [
        ['fleet', 'Fleet'],
        ['teams', 'Teams'],
        ['tokens', 'Tokens'],
      ]
    : [['team', who.team?.name ?? 'Team']];
  let page;
  if (ADMIN_ROUTES.includes(current) && !isAdmin) {
    page = (
      <div className="error" role="alert" data-code="FORBIDDEN">
        <strong>Admins only</strong>
        <div>
          This page needs an ADMIN token; you are signed in as {who.role} of team {who.team?.name}.{' '}
          <a href="#/team">Back to your team</a>
        </div>
      </div>
    );
  } else if (isAdmin) {
    page = <AdminView page={current === 'team' ? 'fleet' : current} />;
  } else {
    page = <TeamView teamId={who.team!.id} teamName={who.team!.name} role={who.role} />;
  }
  return (
    <>
      <header>
        <a className="brand" href="#/">
          GPU Shards
        </a>
        <nav aria-label="Main">
          {links.map(([id, label]) => (
            <a key={id} href={`#/${id}`} aria-current={current === id ? 'page' : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <span className="who" data-testid="who">
          {who.name} · {who.role}
          {who.team ? ` · ${who.team.name}` : ''}
        </span>
        <a href="/explorer">API explorer</a>
        <button onClick={() => signOut()}>Sign out</button>
      </header>
      <main>
        <ErrorBox error={me.error} />
        {page}
      </main>
    </>
  );
}

import { useEffect, useMemo, useState } from 'react';
import { Provider, useQuery } from 'urql';
import { createApiClient } from './client.js';
import { MeDocument } from '@gpushards/graphql-client';
import { clearToken, storedToken, storeToken } from './session.js';
import { ErrorBox, Loading } from './ui.js';
import { SignIn } from './views/SignIn.js';
import { TeamView } from './views/team/TeamView.js';
import { TeamSwitcher } from './views/TeamSwitcher.js';
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

/**
 * How this tab is signed in: an API token it keeps (sessionStorage), a browser session (the
 * cookie sign-in through the organisation's provider set), or not yet known / not at all.
 */
type Credential = { kind: 'token'; token: string } | { kind: 'session'; generation: number };

export function App() {
  const [credential, setCredential] = useState<Credential | null | undefined>(() => {
    const token = storedToken();
    return token ? { kind: 'token', token } : undefined;
  });
  // No token: is there a session (its cookie is HttpOnly: ask the API)?
  useEffect(() => {
    if (credential !== undefined) return;
    void hasSession().then((yes) => setCredential(yes ? { kind: 'session', generation: 0 } : null));
  }, [credential]);
  const api = useMemo(
    () =>
      credential
        ? createApiClient(credential.kind === 'token' ? credential.token : null)
        : undefined,
    [credential],
  );
  useEffect(() => () => api?.close(), [api]);

  if (credential === undefined) return <Loading what="your session" />;
  if (credential === null || !api) {
    return (
      <SignIn
        onSignIn={(value) => {
          storeToken(value);
          setCredential({ kind: 'token', token: value });
        }}
      />
    );
  }
  const signOut = (problem?: string) => {
    if (problem) sessionStorage.setItem('gpushards.portal.problem', problem);
    if (credential.kind === 'token') {
      clearToken();
      setCredential(null);
      return;
    }
    void endSession().then((providerLogout) => {
      if (providerLogout) location.assign(providerLogout);
      else setCredential(null);
    });
  };
  const switched =
    credential.kind === 'session'
      ? () => setCredential({ kind: 'session', generation: credential.generation + 1 })
      : undefined;
  return (
    <Provider value={api.client}>
      <Shell signOut={signOut} {...(switched ? { onTeamSwitched: switched } : {})} />
    </Provider>
  );
}

/** Whether this browser has a session: `me` answers without a token. */
async function hasSession(): Promise<boolean> {
  try {
    const response = await fetch('/graphql', {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: '{ me { id } }' }),
    });
    const body = (await response.json()) as { data?: { me?: unknown } | null };
    return Boolean(body.data?.me);
  } catch {
    return false;
  }
}

/** Ends the session here; answers where to sign out at the provider too, if it says. */
async function endSession(): Promise<string | null> {
  try {
    const response = await fetch('/auth/logout', { method: 'POST', credentials: 'same-origin' });
    const body = (await response.json()) as { providerLogout?: string | null };
    return body.providerLogout ?? null;
  } catch {
    return null;
  }
}

const ADMIN_ROUTES = ['fleet', 'teams', 'tokens', 'sign-in'];

export function Shell({
  signOut,
  onTeamSwitched,
}: {
  signOut: (problem?: string) => void;
  /** Set for a browser session: its person may act as another of their teams. */
  onTeamSwitched?: () => void;
}) {
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
        ['sign-in', 'Sign-in'],
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
        {onTeamSwitched && (
          <TeamSwitcher current={who.team?.id ?? null} onSwitched={onTeamSwitched} />
        )}
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

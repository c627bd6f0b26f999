import { useEffect, useState, type FormEvent } from 'react';
import { authorizationOf } from '../session.js';
import { ErrorBox } from '../ui.js';
import type { ErrorLike } from '../logic/errors.js';

/** Checks the token with `{ me }` before keeping it, so a bad one gets a clear message here. */
export function SignIn({ onSignIn }: { onSignIn: (token: string) => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<ErrorLike | null>(() => {
    const problem = sessionStorage.getItem('gpushards.portal.problem');
    sessionStorage.removeItem('gpushards.portal.problem');
    return problem
      ? { graphQLErrors: [{ message: problem, extensions: { code: 'UNAUTHENTICATED' } }] }
      : null;
  });
  const [busy, setBusy] = useState(false);
  const [provider, setProvider] = useState<boolean>(false);
  useEffect(() => {
    void fetch('/auth/config')
      .then((r) => (r.ok ? (r.json() as Promise<{ oidc: boolean }>) : { oidc: false }))
      .then((config) => setProvider(config.oidc))
      .catch(() => setProvider(false));
  }, []);

  async function submit(event: FormEvent) {
    event.preventDefault();
    if (token.trim() === '') {
      setError({
        graphQLErrors: [{ message: 'paste a token first', extensions: { code: 'BAD_USER_INPUT' } }],
      });
      return;
    }
    setBusy(true);
    setError(null);
    try {
      const response = await fetch('/graphql', {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: authorizationOf(token) },
        body: JSON.stringify({ query: '{ me { id role } }' }),
      });
      const body = (await response.json()) as {
        data?: unknown;
        errors?: ErrorLike['graphQLErrors'];
      };
      if (body.errors?.length) setError({ graphQLErrors: body.errors });
      else onSignIn(token.trim());
    } catch (cause) {
      setError({ networkError: { message: (cause as Error).message } });
    } finally {
      setBusy(false);
    }
  }

  return (
    <main className="signin">
      <h1>GPU Shards</h1>
      {provider && (
        <p>
          <a className="button" href="/auth/oidc/login">
            Sign in with your organisation
          </a>
        </p>
      )}
      <form onSubmit={submit} aria-label="Sign in">
        <label htmlFor="token">API token</label>
        <input
          id="token"
          type="password"
          autoComplete="off"
          autoFocus
          placeholder="gps_…"
          value={token}
          onChange={(e) => setToken(e.target.value)}
        />
        <button type="submit" disabled={busy}>
          {busy ? 'Checking…' : 'Sign in'}
        </button>
        <p className="muted">
          Kept for this browser tab only (sessionStorage), never stored on disk. An admin's first
          token is in the data folder: <code>cat .gpushards/admin-token</code>.
        </p>
      </form>
      <ErrorBox error={error} />
    </main>
  );
}

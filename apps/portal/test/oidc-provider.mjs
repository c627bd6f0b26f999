// A real OpenID Connect provider for the tests (oidc-provider, a certified implementation), run
// as a process of its own: `node oidc-provider.mjs <accounts.json> <client.json>`. It listens on
// 127.0.0.1 on a free port and prints one line `issuer <url>` once it serves.
//
// accounts.json: { "<login>": { "email", "name", "groups": [...], "disabled": false } }, read
// again at every use, so a test changes a person's groups (seen at their next sign-in) or
// disables them (their next refresh is refused: invalid_grant) by rewriting the file.
// client.json: { "client_id", "client_secret", "redirect_uris": [...], "post_logout_redirect_uris": [...],
// "backchannel_logout_uri" }: a person signing out here (its /session/end page) makes the
// provider post a logout token, with the session's sid, to that URI (Back-Channel Logout 1.0).
// Sign-in is oidc-provider's development login form (any password) and consent page.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import Provider from 'oidc-provider';

const [accountsFile, clientFile] = process.argv.slice(2);
if (!accountsFile || !clientFile) {
  console.error('usage: node oidc-provider.mjs <accounts.json> <client.json>');
  process.exit(2);
}
const accounts = () => JSON.parse(readFileSync(accountsFile, 'utf8'));
const client = JSON.parse(readFileSync(clientFile, 'utf8'));

const server = createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [
    {
      ...client,
      grant_types: [
        'authorization_code',
        'refresh_token',
        'urn:ietf:params:oauth:grant-type:device_code',
      ],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      ...(client.backchannel_logout_uri ? { backchannel_logout_session_required: true } : {}),
    },
  ],
  async findAccount(_ctx, id) {
    const account = accounts()[id];
    // Unknown or disabled: no account, so a refresh for it is refused.
    if (account === undefined || account.disabled) return undefined;
    return {
      accountId: id,
      claims: () => ({
        sub: id,
        email: account.email,
        email_verified: true,
        name: account.name,
        groups: account.groups ?? [],
      }),
    };
  },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
    groups: ['groups'],
  },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
  // The groups in the ID token itself, as most providers can be set to send them.
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: true },
    rpInitiatedLogout: { enabled: true },
    backchannelLogout: { enabled: true },
    // The CLI's sign-in (gpushards login --sso): a code entered on the provider's /device page.
    deviceFlow: { enabled: true },
    revocation: { enabled: true },
  },
  issueRefreshToken: async (_ctx, c) => c.grantTypeAllowed('refresh_token'),
  ttl: {
    AccessToken: 300,
    IdToken: 300,
    RefreshToken: 3600,
    Session: 3600,
    Grant: 3600,
    Interaction: 600,
  },
  cookies: { keys: ['gpushards-test-provider'] },
});
// Quiet: its development-only warnings are expected here.
provider.on('server_error', (_ctx, error) => console.error(`provider error: ${error.message}`));
server.on('request', provider.callback());
console.log(`issuer ${issuer}`);
process.on('SIGTERM', () => server.close(() => process.exit(0)));

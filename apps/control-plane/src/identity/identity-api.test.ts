import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { loadConfigFromEnv, ConfigError } from '../config/control-plane-config.js';
import type { IdentityConfig } from '../config/identity-env.js';
import {
  startApiTestHarness,
  type ApiTestHarness,
  type GraphqlResponse,
} from '../testing/api-test-harness.js';
import { createTestTeam, type TestTeam } from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { SESSION_COOKIE } from './session-cookie.js';
import { SessionsService } from './sessions.service.js';

/**
 * Sessions of people signed in through OpenID Connect, on PostgreSQL and PGlite: the group
 * mapping decides their teams, their cookie authenticates HTTP and graphql-ws (from the portal's
 * origin only), the audit trail names them, and an ended or expired session is refused, also on
 * an open subscription. (The provider itself, and the browser's sign-in through it, are tested
 * in the portal tier: apps/portal/test/sign-in.test.mjs.)
 */

const PUBLIC_URL = 'http://127.0.0.1:1';
const identity: IdentityConfig = {
  issuer: new URL('http://127.0.0.1:2/'),
  clientId: 'gpushards',
  clientSecret: 'not used here',
  publicUrl: new URL(PUBLIC_URL),
  groupsClaim: 'groups',
  scopes: ['email', 'groups'],
  sessionSeconds: 3600,
  recheckSeconds: 3600,
};

const SET = `mutation ($group: String!, $role: Role!, $teamId: ID) {
  setGroupMapping(group: $group, role: $role, teamId: $teamId) { id group role team { name } }
}`;
const ME = `{ me { id name role team { name } } session { person { subject email } memberships { role team { name } } } }`;

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

describe('identity settings', () => {
  const base = { GPUSHARDS_DATA_DIR: '/tmp/x' };
  it('none of the OIDC variables: no sign-in, API tokens only', () => {
    assert.equal(loadConfigFromEnv(base, '/').identity, undefined);
  });
  it('issuer, client id and secret together, with clear errors otherwise', () => {
    const full = {
      ...base,
      GPUSHARDS_OIDC_ISSUER: 'https://id.example.com/realms/acme',
      GPUSHARDS_OIDC_CLIENT_ID: 'gpushards',
      GPUSHARDS_OIDC_CLIENT_SECRET: 's3cret',
      GPUSHARDS_PUBLIC_URL: 'https://gpus.example.com',
    };
    const config = loadConfigFromEnv(full, '/').identity!;
    assert.equal(config.issuer.href, 'https://id.example.com/realms/acme');
    assert.equal(config.publicUrl.origin, 'https://gpus.example.com');
    assert.equal(config.groupsClaim, 'groups');
    const refused = (env: Record<string, string>, pattern: RegExp) =>
      assert.throws(
        () => loadConfigFromEnv(env, '/'),
        (error: Error) =>
          error instanceof ConfigError &&
          pattern.test(error.message) &&
          !error.message.includes('s3cret'),
      );
    refused(
      { ...base, GPUSHARDS_OIDC_ISSUER: full.GPUSHARDS_OIDC_ISSUER },
      /GPUSHARDS_OIDC_CLIENT_ID and GPUSHARDS_OIDC_CLIENT_SECRET: .*together/,
    );
    refused(
      { ...full, GPUSHARDS_OIDC_ISSUER: 'http://id.example.com' },
      /GPUSHARDS_OIDC_ISSUER .*https/,
    );
    refused({ ...full, GPUSHARDS_OIDC_ISSUER: 'not a url' }, /GPUSHARDS_OIDC_ISSUER/);
    refused({ ...full, GPUSHARDS_SESSION_SECONDS: '10' }, /GPUSHARDS_SESSION_SECONDS .*60/);
    refused(
      { ...full, GPUSHARDS_OIDC_RECHECK_SECONDS: '99999', GPUSHARDS_SESSION_SECONDS: '600' },
      /RECHECK/,
    );
  });
});

for (const kind of TEST_DATABASE_KINDS) {
  describe(`sessions on ${kind}`, () => {
    let h: ApiTestHarness;
    let ml: TestTeam;
    let infra: TestTeam;
    let sessions: SessionsService;

    const graphql = async <T>(
      query: string,
      cookie: string,
      variables = {},
    ): Promise<GraphqlResponse<T>> => {
      const response = await fetch(h.controlPlane.graphqlUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', cookie: `${SESSION_COOKIE}=${cookie}` },
        body: JSON.stringify({ query, variables }),
      });
      return (await response.json()) as GraphqlResponse<T>;
    };
    const signIn = (
      subject: string,
      groups: string[],
      seconds = 3600,
      providerSessionId: string | null = null,
    ) =>
      sessions.start(
        { ...identity, sessionSeconds: seconds },
        {
          subject,
          email: `${subject}@example.com`,
          name: subject,
          groups,
          refreshToken: null,
          idToken: null,
          providerSessionId,
        },
      );

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { identity },
      });
      sessions = h.controlPlane.app.get(SessionsService);
      ml = await createTestTeam(h, 'ml');
      infra = await createTestTeam(h, 'infra');
      for (const [group, role, teamId] of [
        ['ml-people', 'MEMBER', ml.id],
        ['infra-readers', 'VIEWER', infra.id],
        ['infra-people', 'MEMBER', infra.id],
        ['gpu-ops', 'ADMIN', null],
      ] as const) {
        const set = await h.graphql(SET, { group, role, teamId });
        assert.equal(set.errors, undefined, JSON.stringify(set.errors));
      }
    });
    after(async () => {
      await h?.close();
    });

    it('the groups give exactly the mapped teams; the cookie signs the person in; the audit names them', async () => {
      const alice = await signIn('alice', ['ml-people', 'infra-readers', 'unmapped']);
      const me = await graphql<{
        me: { role: string; team: { name: string } };
        session: {
          person: { email: string };
          memberships: { role: string; team: { name: string } }[];
        };
      }>(ME, alice.secret);
      assert.equal(me.errors, undefined, JSON.stringify(me.errors));
      assert.deepEqual(me.data!.session.memberships.map((m) => `${m.team.name}:${m.role}`).sort(), [
        'infra:VIEWER',
        'ml:MEMBER',
      ]);
      assert.equal(me.data!.session.person.email, 'alice@example.com');
      // Acting as one team at a time; a token made while signed in is hers.
      const token = await graphql<{
        createApiToken: { token: { id: string; owner: { subject: string } } };
      }>(
        `
          mutation {
            createApiToken(role: VIEWER, name: "alice ci") {
              token {
                id
                owner {
                  subject
                }
              }
            }
          }
        `,
        alice.secret,
      );
      assert.equal(token.errors, undefined, JSON.stringify(token.errors));
      assert.equal(token.data!.createApiToken.token.owner.subject, 'alice');
      const audit = await h.prisma.auditEvent.findFirstOrThrow({
        where: { action: 'token.create', targetId: token.data!.createApiToken.token.id },
      });
      assert.deepEqual(
        { subject: audit.actorSubject, email: audit.actorEmail, credential: audit.actorTokenId },
        { subject: 'alice', email: 'alice@example.com', credential: alice.id },
      );
      await assert.rejects(signIn('mallory', ['unmapped']), /give no access/);
    });

    it('selectTeam switches between her teams only; an admin group makes an admin', async () => {
      const bob = await signIn('bob', ['infra-people', 'ml-people']);
      const switched = await graphql<{ selectTeam: { role: string } }>(
        `
          mutation ($t: ID) {
            selectTeam(teamId: $t) {
              role
              team {
                name
              }
            }
          }
        `,
        bob.secret,
        { t: infra.id },
      );
      assert.equal(switched.data?.selectTeam.role, 'MEMBER', JSON.stringify(switched));
      const now = await graphql<{ me: { team: { name: string } } }>(ME, bob.secret);
      assert.equal(now.data!.me.team.name, 'infra');
      const other = await createTestTeam(h, 'other');
      const refused = await graphql(
        `
          mutation ($t: ID) {
            selectTeam(teamId: $t) {
              role
            }
          }
        `,
        bob.secret,
        {
          t: other.id,
        },
      );
      assert.equal(refused.errors?.[0]?.extensions?.code, 'NOT_FOUND');
      const ops = await signIn('olga', ['gpu-ops']);
      const admin = await graphql<{ me: { role: string } }>(ME, ops.secret);
      assert.equal(admin.data!.me.role, 'ADMIN');
    });

    it('an ended or expired session is refused, and its open subscription ends', async () => {
      const carol = await signIn('carol', ['ml-people']);
      const done = subscriptionEnds(h.controlPlane.graphqlUrl, carol.secret, PUBLIC_URL);
      await done.connected;
      await sessions.end(carol.id, 'signed out', null);
      assert.equal(await done.ended, 'complete');
      const after = await graphql(ME, carol.secret);
      assert.equal(after.errors?.[0]?.extensions?.code, 'UNAUTHENTICATED');

      // Expiry: a session of two seconds (the settings allow 60 at least; the service takes any).
      const dave = await signIn('dave', ['ml-people'], 2);
      const open = subscriptionEnds(h.controlPlane.graphqlUrl, dave.secret, PUBLIC_URL);
      await open.connected;
      assert.equal(await open.ended, 'complete');
      assert.equal(
        (await graphql(ME, dave.secret)).errors?.[0]?.extensions?.code,
        'UNAUTHENTICATED',
      );
    });

    it('a provider logout ends the sessions it names (by sid, or all of a subject), also on an open subscription', async () => {
      const first = await signIn('frank', ['ml-people'], 3600, 'provider-session-1');
      const second = await signIn('frank', ['ml-people'], 3600, 'provider-session-2');
      const other = await signIn('gina', ['ml-people'], 3600, 'provider-session-1');
      const open = subscriptionEnds(h.controlPlane.graphqlUrl, first.secret, PUBLIC_URL);
      await open.connected;
      const ended = await sessions.endForProvider(identity.issuer.href, {
        subject: 'frank',
        providerSessionId: 'provider-session-1',
      });
      assert.equal(ended, 1, "frank's session in that provider session only");
      assert.equal(await open.ended, 'complete');
      const code = async (secret: string) =>
        (await graphql(ME, secret)).errors?.[0]?.extensions?.code;
      assert.equal(await code(first.secret), 'UNAUTHENTICATED');
      assert.equal(await code(second.secret), undefined, 'his other session stays');
      assert.equal(await code(other.secret), undefined, "another person's session stays");
      assert.equal(
        await sessions.endForProvider('http://another-issuer.example/', {
          subject: 'frank',
          providerSessionId: null,
        }),
        0,
        "another issuer's logout ends nothing here",
      );
      assert.equal(
        await sessions.endForProvider(identity.issuer.href, {
          subject: 'frank',
          providerSessionId: null,
        }),
        1,
        'a sub without a sid: every open session of that person',
      );
      assert.equal(await code(second.secret), 'UNAUTHENTICATED');
      const audit = await h.prisma.auditEvent.findMany({
        where: { action: 'session.end', details: { path: ['reason'], equals: 'provider logout' } },
      });
      assert.equal(audit.length, 2);
      const metrics = await (await fetch(`${h.controlPlane.url}/metrics`)).text();
      assert.match(metrics, /gpushards_sessions_ended_total\{reason="provider_logout"\} 2/);
      assert.match(metrics, /gpushards_active_sessions \d+/);
    });

    it('the back-channel logout endpoint refuses what is not a verified logout token, ending nothing', async () => {
      const hank = await signIn('hank', ['ml-people'], 3600, 'provider-session-3');
      const post = (body: string, type = 'application/x-www-form-urlencoded') =>
        fetch(`${h.controlPlane.url}/auth/oidc/backchannel-logout`, {
          method: 'POST',
          headers: { 'content-type': type },
          body,
        });
      const missing = await post('nothing=here');
      assert.equal(missing.status, 400);
      assert.equal(missing.headers.get('cache-control'), 'no-store');
      assert.equal(((await missing.json()) as { error: string }).error, 'invalid_request');
      // Not JSON either: the token is a form field, as the specification says.
      assert.equal((await post('{"logout_token":"x"}', 'application/json')).status, 400);
      assert.equal((await graphql(ME, hank.secret)).errors, undefined, 'the session is still open');
      const metrics = await (await fetch(`${h.controlPlane.url}/metrics`)).text();
      assert.match(metrics, /gpushards_backchannel_logouts_total\{outcome="invalid"\} 2/);
    });

    it("a CLI's session (Authorization: Session gpss_…) acts and is audited as the person", async () => {
      const ivan = await sessions.start(
        identity,
        {
          subject: 'ivan',
          email: 'ivan@example.com',
          name: 'Ivan',
          groups: ['ml-people'],
          refreshToken: null,
          idToken: null,
          providerSessionId: null,
        },
        undefined,
        'cli',
      );
      const created = await fetch(h.controlPlane.graphqlUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Session ${ivan.secret}` },
        body: JSON.stringify({
          query: 'mutation { createApiToken(role: VIEWER, name: "ivan ci") { token { id } } }',
        }),
      });
      const body = (await created.json()) as GraphqlResponse<{
        createApiToken: { token: { id: string } };
      }>;
      assert.equal(body.errors, undefined, JSON.stringify(body.errors));
      const audit = await h.prisma.auditEvent.findFirstOrThrow({
        where: { action: 'token.create', targetId: body.data!.createApiToken.token.id },
      });
      assert.deepEqual(
        { email: audit.actorEmail, credential: audit.actorTokenId },
        { email: 'ivan@example.com', credential: ivan.id },
      );
      const started = await h.prisma.auditEvent.findFirstOrThrow({
        where: { action: 'session.start', actorTokenId: ivan.id },
      });
      assert.equal((started.details as { via?: string }).via, 'cli');
      // The device flow's endpoints: a handle this control plane did not seal is refused.
      const poll = await fetch(`${h.controlPlane.url}/auth/cli/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ handle: 'forged' }),
      });
      assert.equal(poll.status, 400);
      assert.equal(((await poll.json()) as { error: string }).error, 'invalid_request');
    });

    it("a WebSocket from another site's page is not signed in by the cookie", async () => {
      const erin = await signIn('erin', ['ml-people']);
      const foreign = subscriptionEnds(
        h.controlPlane.graphqlUrl,
        erin.secret,
        'https://evil.example',
      );
      assert.equal(await foreign.ended, 'closed 4403');
    });
  });
}

/** A shardEvents subscription signed in by cookie from `origin`; how it ended. */
function subscriptionEnds(url: string, secret: string, origin: string) {
  let connected!: () => void;
  const ready = new Promise<void>((resolve) => (connected = resolve));
  const client = createClient({
    url: url.replace(/^http/, 'ws'),
    retryAttempts: 0,
    lazy: false,
    on: { connected: () => connected() },
    webSocketImpl: class extends WebSocket {
      constructor(address: string, protocols: string | string[]) {
        super(address, protocols, { headers: { cookie: `${SESSION_COOKIE}=${secret}`, origin } });
      }
    },
  });
  const ended = new Promise<string>((resolve) => {
    client.subscribe(
      { query: 'subscription { shardEvents { kind } }' },
      {
        next: () => undefined,
        error: (error) => resolve(`closed ${(error as { code?: number }).code}`),
        complete: () => resolve('complete'),
      },
    );
  }).finally(() => void client.dispose());
  return { connected: ready, ended };
}

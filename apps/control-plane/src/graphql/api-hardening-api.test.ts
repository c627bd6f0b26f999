import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { createClient } from 'graphql-ws';
import { WebSocket } from 'ws';
import {
  startApiTestHarness,
  type ApiTestHarness,
  type GraphqlResponse,
} from '../testing/api-test-harness.js';
import { DEFAULT_API_LIMITS } from '../config/api-limits.js';
import { JSON_BODY_LIMIT_BYTES } from '../http/http-adapter.js';
import { ShardEventBus } from '../events/shard-event-bus.js';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  registerRequest,
  shardRowCounts,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import { within } from '../testing/bounded-wait.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';

/**
 * Issue 15 through HTTP and graphql-ws, on PostgreSQL and PGlite: requests too deep, too
 * aliased, too long or too costly are refused before they run with QUERY_TOO_COMPLEX naming
 * the limit and the figure; rate limits; introspection and /metrics behind tokens; LD_* and
 * images off the allow-list refused with nothing written; a revoked token's subscription ends.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

/** `me { team { apiTokens { edges { node { team { apiTokens … ` nested `levels` times. */
function nestedTokens(levels: number): string {
  let inner = 'id';
  for (let i = 0; i < levels; i++) inner = `team { apiTokens { edges { node { ${inner} } } } }`;
  return `{ me { ${inner} } }`;
}

function tooComplex(response: GraphqlResponse, limit: string): Record<string, unknown> {
  assertError(response, 'QUERY_TOO_COMPLEX', limit);
  const extensions = response.errors![0]!.extensions!;
  assert.equal(extensions['limit'], limit, JSON.stringify(response));
  assert.equal(typeof extensions['maximum'], 'number');
  assert.ok((extensions['found'] as number) > (extensions['maximum'] as number));
  assert.equal(response.data ?? undefined, undefined, 'nothing ran');
  assert.equal(response.status, 400);
  return extensions;
}

const METRICS_TOKEN = 'metrics-secret-0123456789';

for (const kind of TEST_DATABASE_KINDS) {
  describe(`API hardening on ${kind}`, () => {
    let h: ApiTestHarness;
    let alpha: TestTeam;

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: {
          shardCommands: new FakeShardCommands(),
          security: { imageAllowList: ['ghcr.io/org', 'ubuntu'], metricsToken: METRICS_TOKEN },
        },
      });
      await h.controlPlane.app
        .get(AgentReportsService)
        .registerHost(registerRequest('hard-1', { gpus: 2 }));
      alpha = await createTestTeam(h, 'alpha');
    });
    after(async () => {
      await h?.close();
    });

    it('a deep query (the 53-level apiTokens chain) is refused before it runs', async () => {
      const extensions = tooComplex(await h.graphql(nestedTokens(13), {}, alpha.viewer), 'depth');
      assert.equal(extensions['maximum'], DEFAULT_API_LIMITS.maxDepth);
      assert.equal(extensions['found'], 2 + 13 * 4);
      // Three levels (14 deep) is past the limit too; two levels (10) is an ordinary query.
      tooComplex(await h.graphql(nestedTokens(3), {}, alpha.viewer), 'depth');
      assertOk(await h.graphql(nestedTokens(2), {}, alpha.viewer));
    });

    it('thousands of aliases are refused, and so is a body of too many tokens', async () => {
      const now = new Date().toISOString();
      const usage = (i: number) =>
        `u${i}: usage(teamId: "${alpha.id}", from: "2026-01-01T00:00:00Z", to: "${now}") { teamId }`;
      // 1,800 aliases fit the body limit (the 5,000 of the report do not: a 413, see http/).
      const aliased = `{ ${Array.from({ length: 1800 }, (_, i) => usage(i)).join(' ')} }`;
      assert.ok(aliased.length < JSON_BODY_LIMIT_BYTES);
      const tokens = await h.graphql(aliased, {}, alpha.viewer);
      tooComplex(tokens, 'tokens');
      const fewer = `{ ${Array.from({ length: 200 }, (_, i) => usage(i)).join(' ')} }`;
      const extensions = tooComplex(await h.graphql(fewer, {}, alpha.viewer), 'aliases');
      assert.equal(extensions['found'], 200);
      // The same through fragments counts the same.
      const viaFragment = `{ ...F } fragment F on Query { ${Array.from({ length: 40 }, (_, i) => usage(i)).join(' ')} }`;
      tooComplex(await h.graphql(viaFragment, {}, alpha.viewer), 'aliases');
    });

    it('the cost model multiplies page sizes through nesting, per role budget', async () => {
      const nestedPages = `{ shards(first: 500) { edges { node { host { shards(first: 500) { edges { node { id name } } } } } } } }`;
      const member = tooComplex(await h.graphql(nestedPages, {}, alpha.member), 'cost');
      assert.equal(member['maximum'], DEFAULT_API_LIMITS.costBudget.MEMBER);
      const admin = tooComplex(await h.graphql(nestedPages), 'cost');
      assert.equal(admin['maximum'], DEFAULT_API_LIMITS.costBudget.ADMIN);
      // Page size from a variable counts the same as a literal.
      const variable = `query ($n: Int) { shards(first: $n) { edges { node { host { shards(first: $n) { edges { node { id } } } } } } } }`;
      tooComplex(await h.graphql(variable, { n: 500 }, alpha.member), 'cost');
      // The portal's largest page is well inside the budget.
      const page = `{ shards(first: 500) { edges { cursor node { id name state image hostId teamId
        memoryPerGpu { bytes human } gpus { index model reserved { bytes } } team { id name } } }
        pageInfo { hasNextPage endCursor } } }`;
      assertOk(await h.graphql(page, {}, alpha.viewer));
    });

    it('introspection needs a token; /metrics needs its bearer token when one is set', async () => {
      const introspection = '{ __schema { queryType { name } } }';
      assertError(await h.graphql(introspection, {}, null), 'UNAUTHENTICATED');
      assertError(
        await h.graphql('{ __type(name: "Shard") { name } }', {}, null),
        'UNAUTHENTICATED',
      );
      assert.equal(
        assertOk(
          await h.graphql<{ __schema: { queryType: { name: string } } }>(
            introspection,
            {},
            alpha.viewer,
          ),
        ).__schema.queryType.name,
        'Query',
      );
      const url = `${h.controlPlane.url}/metrics`;
      const open = await fetch(url);
      assert.equal(open.status, 401);
      assert.ok(!(await open.text()).includes('alpha'), 'no team names without the token');
      assert.equal(
        (await fetch(url, { headers: { authorization: `Bearer ${h.adminToken}` } })).status,
        401,
      );
      const scraped = await fetch(url, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
      assert.equal(scraped.status, 200);
      assert.match(await scraped.text(), /^# HELP /m);
    });

    it('LD_* env keys and images off the allow-list are refused, nothing written', async () => {
      const before = await shardRowCounts(h);
      for (const name of ['LD_LIBRARY_PATH', 'LD_AUDIT', 'LD_PRELOAD', 'LD_BIND_NOW']) {
        const response = await createShard(h, alpha.member, { env: [{ name, value: '/x' }] });
        assertError(response, 'BAD_USER_INPUT', name);
        assert.match(response.errors![0]!.message, new RegExp(name));
      }
      for (const image of [
        'docker.io/evil/x:1',
        'ghcr.io/organisation/x',
        'ubuntu-evil:1',
        'ghcr.io.evil.io/org/x',
      ]) {
        const response = await createShard(h, alpha.member, { image });
        assertError(response, 'IMAGE_NOT_ALLOWED', image);
        assert.deepEqual(response.errors![0]!.extensions!['allowed'], ['ghcr.io/org', 'ubuntu']);
      }
      assert.deepEqual(await shardRowCounts(h), before);
      assertOk(await createShard(h, alpha.member, { name: 'allowed', image: 'ubuntu:24.04' }));
      assertOk(await createShard(h, alpha.member, { name: 'allowed-2', image: 'ghcr.io/org/x:1' }));
    });

    it("a revoked token's subscription ends at once and hears nothing after", async () => {
      const team = await createTestTeam(h, 'subscribers');
      const token = assertOk(
        await h.graphql<{ createApiToken: { secret: string; token: { id: string } } }>(
          `mutation ($teamId: ID) { createApiToken(teamId: $teamId, role: VIEWER, name: "watcher") { secret token { id } } }`,
          { teamId: team.id },
        ),
      ).createApiToken;
      const heard: string[] = [];
      let heardFirst!: () => void;
      const firstEvent = new Promise<void>((resolve) => (heardFirst = resolve));
      let ended!: () => void;
      const completed = new Promise<void>((resolve) => (ended = resolve));
      const client = createClient({
        url: h.controlPlane.graphqlUrl.replace(/^http/, 'ws'),
        webSocketImpl: WebSocket,
        connectionParams: { Authorization: `Bearer ${token.secret}` },
        retryAttempts: 0,
      });
      client.subscribe<{ shardEvents: { shard: { name: string; env: { value: string }[] } } }>(
        { query: 'subscription { shardEvents { shard { name env { value } } } }' },
        {
          next: (message) => {
            const name = message.data?.shardEvents.shard.name;
            if (name !== undefined) heard.push(name);
            heardFirst();
          },
          error: () => undefined,
          complete: () => ended(),
        },
      );
      const bus = h.controlPlane.app.get(ShardEventBus);
      const subscribers = bus.subscriberCount;
      try {
        await within(
          bus.whenSubscribers((count) => count === subscribers + 1),
          'the subscription',
        );
        assertOk(await createShard(h, team.member, { name: 'before-revoke' }));
        await within(firstEvent, 'the first event');
        assert.deepEqual(heard, ['before-revoke']);
        assertOk(
          await h.graphql(`mutation ($id: ID!) { revokeApiToken(id: $id) { id } }`, {
            id: token.token.id,
          }),
        );
        await within(completed, 'the subscription to end on revocation');
        assertOk(await createShard(h, team.member, { name: 'after-revoke' }));
        // The event of the second shard was published (synchronously, after commit) before
        // createShard answered: a live subscription would have it by now.
        assert.deepEqual(heard, ['before-revoke']);
      } finally {
        await client.dispose();
      }
    });
  });
}

describe('rate limits, the introspection switch, no agents', () => {
  let h: ApiTestHarness;
  let team: TestTeam;

  before(async () => {
    h = await startApiTestHarness('pglite', {
      controlPlane: {
        security: {
          limits: { ...DEFAULT_API_LIMITS, ratePerSecond: 0.01, rateBurst: 8 },
          publicIntrospection: true,
          noAgents: true,
        },
      },
    });
    team = await createTestTeam(h, 'limited');
  });
  after(async () => {
    await h?.close();
  });

  it("past its burst a token gets RATE_LIMITED with Retry-After; other tokens don't", async () => {
    for (let i = 0; i < 8; i++) assertOk(await h.graphql('{ me { id } }', {}, team.viewer));
    const response = await fetch(h.controlPlane.graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${team.viewer}` },
      body: JSON.stringify({ query: '{ me { id } }' }),
    });
    assert.equal(response.status, 429);
    const retryAfter = Number(response.headers.get('retry-after'));
    assert.ok(retryAfter >= 1, String(retryAfter));
    const body = (await response.json()) as GraphqlResponse;
    assert.equal(body.errors?.[0]?.extensions?.code, 'RATE_LIMITED');
    assert.equal(body.errors?.[0]?.extensions?.['retryAfterSeconds'], retryAfter);
    assert.equal(body.errors?.[0]?.extensions?.['http'], undefined);
    assertOk(await h.graphql('{ me { id } }', {}, team.member));
  });

  it('the introspection switch opens it without a token', async () => {
    assertOk(await h.graphql('{ __schema { queryType { name } } }', {}, null));
  });

  it('without agents on purpose, createShard answers NO_AGENTS and writes nothing', async () => {
    const before = await shardRowCounts(h);
    assertError(await createShard(h, team.member, {}), 'NO_AGENTS');
    assert.deepEqual(await shardRowCounts(h), before);
  });
});

describe('main.js', () => {
  it('refuses to start without an agent link unless told there are none', () => {
    const main = fileURLToPath(new URL('../main.js', import.meta.url));
    const env = { ...process.env, GPUSHARDS_NATS_URL: '', GPUSHARDS_NO_AGENTS: '' };
    const run = spawnSync(process.execPath, [main], { env, encoding: 'utf8', timeout: 60_000 });
    assert.equal(run.status, 2, run.stderr);
    assert.match(run.stderr, /no agent link: set GPUSHARDS_NATS_URL .* GPUSHARDS_NO_AGENTS=true/);
  });
});

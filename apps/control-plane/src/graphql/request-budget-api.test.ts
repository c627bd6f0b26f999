import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DEFAULT_API_LIMITS } from '../config/api-limits.js';
import { ShardQueriesService } from '../shards/shard-queries.service.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { assertError, assertOk, createTestTeam, type TestTeam } from '../testing/fleet-fixtures.js';
import { gate, holdCalls } from '../testing/held-calls.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';

/**
 * Issue 15 §2, on PostgreSQL and PGlite: a query that runs past the request time budget is
 * answered TIMEOUT (HTTP 503, no partial data) while other requests are served; a token with
 * maxConcurrent requests running gets RATE_LIMITED for the next one, other tokens do not,
 * and the token may ask again once its requests are answered. The shards query is made slow
 * by holding ShardQueriesService.list (testing/held-calls), not by sleeping in the test.
 */

const TIMEOUT_MS = 300;
const MAX_CONCURRENT = 2;
const SHARDS = '{ shards(first: 5) { edges { node { id } } } }';

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

for (const kind of TEST_DATABASE_KINDS) {
  describe(`request time budget and concurrency on ${kind}`, () => {
    let h: ApiTestHarness;
    let team: TestTeam;
    let shardQueries: ShardQueriesService;

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: {
          security: {
            limits: {
              ...DEFAULT_API_LIMITS,
              requestTimeoutMs: TIMEOUT_MS,
              maxConcurrent: MAX_CONCURRENT,
            },
          },
        },
      });
      team = await createTestTeam(h, 'budget');
      shardQueries = h.controlPlane.app.get(ShardQueriesService);
    });
    after(async () => {
      await h.close();
    });

    it('a query past its time budget is answered TIMEOUT, and /healthz is served meanwhile', async () => {
      // The held list waits on a timer of the budget's length started after the request's own
      // budget timer (timers of equal length fire in the order they were made): when it goes
      // on, the budget is spent.
      const held = holdCalls(
        shardQueries,
        'list',
        () => new Promise<void>((resolve) => setTimeout(resolve, TIMEOUT_MS).unref()),
      );
      try {
        const slow = fetch(h.controlPlane.graphqlUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${team.viewer}` },
          body: JSON.stringify({ query: SHARDS }),
        });
        await held.entered(1);
        assert.equal((await fetch(`${h.controlPlane.url}/healthz`)).status, 200);
        const response = await slow;
        assert.equal(response.status, 503);
        const body = (await response.json()) as {
          data?: unknown;
          errors?: { message: string; extensions?: Record<string, unknown> }[];
        };
        assert.equal(body.data ?? undefined, undefined, 'no partial data');
        assert.equal(body.errors?.[0]?.extensions?.['code'], 'TIMEOUT', JSON.stringify(body));
        assert.equal(body.errors?.[0]?.extensions?.['budgetMs'], TIMEOUT_MS);
        assert.match(
          body.errors?.[0]?.message ?? '',
          new RegExp(`time budget of ${TIMEOUT_MS} ms`),
        );
      } finally {
        held.restore();
      }
      // The budget is per request: the same query, no longer held, is served.
      assertOk(await h.graphql(SHARDS, {}, team.viewer));
    });

    it(`a token with ${MAX_CONCURRENT} requests running gets RATE_LIMITED for the next; others do not`, async () => {
      const release = gate();
      const held = holdCalls(shardQueries, 'list', () => release.opened);
      let answered: Awaited<ReturnType<ApiTestHarness['graphql']>>[];
      try {
        const running = Array.from({ length: MAX_CONCURRENT }, () =>
          h.graphql(SHARDS, {}, team.viewer),
        );
        await held.entered(MAX_CONCURRENT);
        const refused = await h.graphql(SHARDS, {}, team.viewer);
        assertError(refused, 'RATE_LIMITED', `${MAX_CONCURRENT} requests running`);
        assert.equal(refused.status, 429);
        assert.match(refused.errors?.[0]?.message ?? '', /the most it may have at once is 2/);
        // Another token of the same team is not limited by this one's requests.
        assertOk(await h.graphql('{ me { id } }', {}, team.member));
        release.open();
        answered = await Promise.all(running);
      } finally {
        release.open();
        held.restore();
      }
      // Held past the time budget or not, each was answered by the query itself, not refused.
      for (const response of answered) {
        const code = response.errors?.[0]?.extensions?.code;
        assert.ok(code === undefined || code === 'TIMEOUT', JSON.stringify(response));
      }
      // Answered requests no longer count: the token may run MAX_CONCURRENT again.
      const again = await Promise.all(
        Array.from({ length: MAX_CONCURRENT }, () => h.graphql(SHARDS, {}, team.viewer)),
      );
      for (const response of again) assertOk(response);
    });
  });
}

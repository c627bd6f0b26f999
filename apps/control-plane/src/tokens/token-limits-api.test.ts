import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { assertError, assertOk, createTestTeam, type TestTeam } from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';

/** Per-token rate and concurrency limits set by admins, on both databases. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const ME = '{ me { id ratePerSecond rateBurst maxConcurrent } }';
const SET = `mutation ($id: ID!, $rate: Int, $burst: Int, $concurrent: Int) {
  setApiTokenLimits(id: $id, ratePerSecond: $rate, rateBurst: $burst, maxConcurrent: $concurrent) {
    id ratePerSecond rateBurst maxConcurrent
  }
}`;

interface Me {
  me: { id: string; ratePerSecond: number | null; rateBurst: number | null };
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`per-token limits on ${kind}`, () => {
    let h: ApiTestHarness;
    let team: TestTeam;

    before(async () => {
      h = await startApiTestHarness(kind, { ...(postgres ? { server: postgres } : {}) });
      team = await createTestTeam(h, 'limited');
    });
    after(async () => {
      await h?.close();
    });

    it('an admin gives one token a small bucket: its next requests answer RATE_LIMITED with retry-after; others keep the default', async () => {
      const me = assertOk(await h.graphql<Me>(ME, {}, team.member)).me;
      assert.equal(me.rateBurst, null, 'default: the fleet limits');
      assertError(await h.graphql(SET, { id: me.id, burst: 1 }, team.member), 'FORBIDDEN');
      const set = assertOk(
        await h.graphql<{ setApiTokenLimits: { rateBurst: number; ratePerSecond: number } }>(SET, {
          id: me.id,
          rate: 1,
          burst: 2,
        }),
      );
      assert.deepEqual(
        [set.setApiTokenLimits.ratePerSecond, set.setApiTokenLimits.rateBurst],
        [1, 2],
      );

      const answers = [];
      for (let i = 0; i < 10; i++) answers.push(await h.graphql<Me>(ME, {}, team.member));
      const limited = answers.filter((a) => a.errors?.[0]?.extensions?.['code'] === 'RATE_LIMITED');
      assert.ok(limited.length >= 5, `limited ${limited.length} of 10 at 1/s with a burst of 2`);
      const first = limited[0]!.errors![0]!;
      assert.ok((first.extensions!['retryAfterSeconds'] as number) >= 1);
      assert.match(first.message, /more than 1 requests per second \(bursts up to 2\)/);

      for (let i = 0; i < 10; i++) assertOk(await h.graphql(ME, {}, team.viewer));
    });

    it('bad limits are refused with BAD_USER_INPUT and nothing changes; unknown tokens NOT_FOUND', async () => {
      const viewer = assertOk(await h.graphql<Me>(ME, {}, team.viewer)).me;
      for (const variables of [{ burst: 0 }, { rate: -1 }, { concurrent: 10_001 }]) {
        assertError(await h.graphql(SET, { id: viewer.id, ...variables }), 'BAD_USER_INPUT');
      }
      const row = await h.prisma.apiToken.findUniqueOrThrow({ where: { id: viewer.id } });
      assert.deepEqual([row.ratePerSecond, row.rateBurst, row.maxConcurrent], [null, null, null]);
      assertError(
        await h.graphql(SET, { id: '00000000-0000-4000-8000-000000000000', burst: 5 }),
        'NOT_FOUND',
      );
    });
  });
}

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { assertOk, createTestTeam, type TestTeam } from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { readsOf, recordStatements } from '../testing/statement-recorder.js';

/**
 * `me` answers from the token row that authenticating the request read: one read of api_token
 * per request, whether the token's caller was cached or not.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const ME = `{ me { id name role prefix lastUsedAt revokedAt ratePerSecond team { id } } }`;

interface Me {
  me: {
    id: string;
    name: string;
    role: string;
    prefix: string;
    lastUsedAt: string | null;
    revokedAt: string | null;
    ratePerSecond: number | null;
    team: { id: string } | null;
  };
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`me reads its token once on ${kind}`, () => {
    let h: ApiTestHarness;
    let team: TestTeam;

    before(async () => {
      h = await startApiTestHarness(kind, postgres ? { server: postgres } : {});
      team = await createTestTeam(h, 'token-reads');
    });
    after(async () => {
      await h?.close();
    });

    it('a token not seen before: one read of api_token, and the row as it is', async () => {
      const { result, statements } = await recordStatements(h.prisma, () =>
        h.graphql<Me>(ME, {}, team.member),
      );
      const me = assertOk(result).me;
      assert.equal(readsOf(statements, 'api_token').length, 1, statements.join('\n'));
      const row = await h.prisma.apiToken.findUniqueOrThrow({
        where: { id: me.id },
        select: { name: true, role: true, prefix: true, teamId: true, ratePerSecond: true },
      });
      assert.deepEqual(
        {
          name: me.name,
          role: me.role,
          prefix: me.prefix,
          teamId: me.team?.id,
          ratePerSecond: me.ratePerSecond,
        },
        { ...row, teamId: team.id },
      );
      assert.equal(me.revokedAt, null);
    });

    it('a token its caller is cached for: still one read, for `me` itself', async () => {
      assertOk(await h.graphql<Me>('{ me { id } }', {}, team.viewer));
      const { result, statements } = await recordStatements(h.prisma, () =>
        h.graphql<Me>(ME, {}, team.viewer),
      );
      assert.equal(assertOk(result).me.role, 'VIEWER');
      assert.equal(readsOf(statements, 'api_token').length, 1, statements.join('\n'));
    });
  });
}

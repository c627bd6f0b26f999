import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  registerRequest,
  shardRowCounts,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';

/** The per-team image allow-list (QuotaPolicy.allowedImages), on both databases. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const SET_POLICY = `mutation ($teamId: ID!, $input: QuotaPolicyInput!) {
  setQuotaPolicy(teamId: $teamId, input: $input) { id quotaPolicy { allowedImages } }
}`;
const POLICY = { maxTotal: '10t', maxShards: 1000, maxPerShard: '1t' };

for (const kind of TEST_DATABASE_KINDS) {
  describe(`team image allow-list on ${kind}`, () => {
    let h: ApiTestHarness;
    let strict: TestTeam;
    let open: TestTeam;

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { shardCommands: new FakeShardCommands() },
      });
      const fleet = h.controlPlane.app.get(AgentReportsService);
      await fleet.registerHost(registerRequest('image-host', { gpus: 2, gpuBytes: 80 * GiB }));
      strict = await createTestTeam(h, 'strict');
      open = await createTestTeam(h, 'open');
    });
    after(async () => {
      await h?.close();
    });

    it('an admin sets the list; its team reads it; a MEMBER may not set it', async () => {
      const set = assertOk(
        await h.graphql<{ setQuotaPolicy: { quotaPolicy: { allowedImages: string[] } } }>(
          SET_POLICY,
          {
            teamId: strict.id,
            input: { ...POLICY, allowedImages: ['ghcr.io/acme/', 'registry.example.com:5000'] },
          },
        ),
      );
      assert.deepEqual(set.setQuotaPolicy.quotaPolicy.allowedImages, [
        'ghcr.io/acme/',
        'registry.example.com:5000',
      ]);
      const read = assertOk(
        await h.graphql<{ me: { team: { quotaPolicy: { allowedImages: string[] } } } }>(
          '{ me { team { quotaPolicy { allowedImages } } } }',
          {},
          strict.viewer,
        ),
      );
      assert.equal(read.me.team.quotaPolicy.allowedImages.length, 2);
      assertError(
        await h.graphql(
          SET_POLICY,
          { teamId: strict.id, input: { ...POLICY, allowedImages: [] } },
          strict.member,
        ),
        'FORBIDDEN',
      );
      const unset = assertOk(
        await h.graphql<{ setQuotaPolicy: { quotaPolicy: { allowedImages: string[] } } }>(
          SET_POLICY,
          { teamId: open.id, input: POLICY },
        ),
      );
      assert.deepEqual(unset.setQuotaPolicy.quotaPolicy.allowedImages, [], 'default: any image');
    });

    it('images under the list run; others answer IMAGE_NOT_ALLOWED naming the list, nothing written', async () => {
      for (const image of [
        'ghcr.io/acme/trainer:1.2',
        'registry.example.com:5000/x/y@sha256:' + 'a'.repeat(64),
      ]) {
        assertOk(await createShard(h, strict.member, { image, name: `ok-${image.length}` }));
      }
      const before = await shardRowCounts(h);
      for (const image of [
        'ubuntu:22.04',
        'ghcr.io/acme-evil/x:1',
        'ghcr.io/other/trainer:1',
        'registry.example.com:5001/x',
      ]) {
        const response = await createShard(h, strict.member, { image });
        assertError(response, 'IMAGE_NOT_ALLOWED', image);
        const error = response.errors![0]!;
        assert.match(
          error.message,
          /the team allows only images under "ghcr.io\/acme\/", "registry.example.com:5000"/,
        );
        assert.equal(error.extensions!['scope'], 'team');
        assert.deepEqual(error.extensions!['allowed'], [
          'ghcr.io/acme/',
          'registry.example.com:5000',
        ]);
      }
      assert.deepEqual(await shardRowCounts(h), before);
      assertOk(await createShard(h, open.member, { image: 'ubuntu:22.04', name: 'any-image' }));
    });

    it('bad prefixes are refused with BAD_USER_INPUT; the policy is unchanged', async () => {
      for (const [allowedImages, field] of [
        [['has space/x'], 'input.allowedImages[0]'],
        [['ok.io', ''], 'input.allowedImages[1]'],
        [Array.from({ length: 65 }, (_, i) => `r${i}.io`), 'input.allowedImages'],
      ] as const) {
        const response = await h.graphql(SET_POLICY, {
          teamId: strict.id,
          input: { ...POLICY, allowedImages },
        });
        assertError(response, 'BAD_USER_INPUT');
        const problems = response.errors![0]!.extensions!['problems'] as { field: string }[];
        assert.ok(
          problems.some((p) => p.field === field),
          JSON.stringify(problems),
        );
      }
      // A policy change that leaves the list out (the portal's form) keeps it.
      assertOk(
        await h.graphql(SET_POLICY, {
          teamId: strict.id,
          input: { ...POLICY, maxShards: 999 },
        }),
      );
      const policy = await h.prisma.quotaPolicy.findUniqueOrThrow({ where: { teamId: strict.id } });
      assert.equal(policy.maxShards, 999);
      assert.deepEqual(policy.allowedImages, ['ghcr.io/acme/', 'registry.example.com:5000']);
    });
  });
}

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { QueueService } from '../queue/queue.service.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  gpuUuidOf,
  registerRequest,
  SET_SHARD_COMPUTE,
  shardRowCounts,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';

/** Compute share per shard in the API: createShard, the team's bound, placement, setShardCompute. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const SET_POLICY = `mutation ($teamId: ID!, $input: QuotaPolicyInput!) {
  setQuotaPolicy(teamId: $teamId, input: $input) { id quotaPolicy { maxComputeSharePercent } }
}`;
const POLICY = { maxTotal: '10t', maxShards: 1000, maxPerShard: '1t' };
const SHARD = `query ($id: ID!) { shard(id: $id) { id state computeSharePercent computeMode } }`;

for (const kind of TEST_DATABASE_KINDS) {
  describe(`compute share on ${kind}`, () => {
    let h: ApiTestHarness;
    let team: TestTeam;
    const commands = new FakeShardCommands();
    const gpu = gpuUuidOf('compute-1', 0);

    /** The GPU's guaranteed total, and the live reservations' shares summed: always equal. */
    const guaranteed = async (): Promise<number> => {
      const row = await h.prisma.gpu.findUniqueOrThrow({ where: { uuid: gpu } });
      const live = await h.prisma.shardGpu.aggregate({
        where: { gpuUuid: gpu, releasedAt: null },
        _sum: { computeSharePermille: true },
      });
      assert.equal(row.guaranteedComputePermille, live._sum.computeSharePermille ?? 0);
      return row.guaranteedComputePermille;
    };
    const create = (name: string, input: Record<string, unknown>, token = team.member) =>
      createShard(h, token, {
        name,
        memoryPerGpu: '4g',
        hostSelector: [{ key: 'pool', value: 'compute' }],
        ...input,
      });

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { shardCommands: commands },
      });
      await h.controlPlane.app
        .get(AgentReportsService)
        .registerHost(registerRequest('compute-1', { gpus: 1, labels: { pool: 'compute' } }));
      team = await createTestTeam(h, 'compute-team');
    });
    after(async () => {
      await h?.close();
    });

    it('bad input is refused with the field, nothing written', async () => {
      const before = await shardRowCounts(h);
      for (const [input, field] of [
        [{ computeSharePercent: 0 }, 'input.computeSharePercent'],
        [{ computeSharePercent: 101 }, 'input.computeSharePercent'],
        [{ computeMode: 'CAPPED' }, 'input.computeMode'],
      ] as const) {
        const response = await create('bad', input);
        assertError(response, 'BAD_USER_INPUT', JSON.stringify(input));
        assert.match(JSON.stringify(response.errors), new RegExp(field.replace('.', '\\.')));
      }
      assert.deepEqual(await shardRowCounts(h), before);
      assert.equal(await guaranteed(), 0);
    });

    it("placement keeps a GPU's guaranteed shares at most 100%; the launch carries the share", async () => {
      const a = assertOk(await create('a', { computeSharePercent: 60 })).createShard;
      const read = assertOk(
        await h.graphql<{ shard: { computeSharePercent: number; computeMode: string } }>(SHARD, {
          id: a.id,
        }),
      ).shard;
      assert.equal(read.computeSharePercent, 60);
      assert.equal(read.computeMode, 'GUARANTEED');
      assert.equal(await guaranteed(), 600);
      const launch = commands.forShard(a.id).find((c) => c.type === 'launch');
      assert.ok(launch?.type === 'launch');
      assert.deepEqual(launch.spec.compute, { sharePermille: 600, mode: 'guaranteed' });

      // Memory would fit; 60% + 50% would not.
      const before = await shardRowCounts(h);
      const refused = await create('b', { computeSharePercent: 50 });
      assertError(refused, 'NO_CAPACITY');
      assert.match(refused.errors![0]!.message, /compute|unguaranteed/);
      assert.deepEqual(await shardRowCounts(h), before, 'nothing written');
      assert.equal(await guaranteed(), 600);

      // No share asked: placed beside it (the default split guarantees nothing).
      const c = assertOk(await create('c', {})).createShard;
      const cRead = assertOk(
        await h.graphql<{ shard: { computeSharePercent: number | null } }>(SHARD, { id: c.id }),
      ).shard;
      assert.equal(cRead.computeSharePercent, null);
      const cLaunch = commands.forShard(c.id).find((x) => x.type === 'launch');
      assert.ok(cLaunch?.type === 'launch');
      assert.deepEqual(cLaunch.spec.compute, { sharePermille: 0, mode: 'guaranteed' });
      assert.equal(await guaranteed(), 600);
      assertOk(await create('d', { computeSharePercent: 40, computeMode: 'CAPPED' }));
      assert.equal(await guaranteed(), 1000);
      const fleet = assertOk(
        await h.graphql<{ host: { gpus: { computeGuaranteedPercent: number }[] } }>(
          `{ host(id: "compute-1") { gpus { computeGuaranteedPercent } } }`,
          {},
          team.viewer,
        ),
      );
      assert.deepEqual(fleet.host.gpus, [{ computeGuaranteedPercent: 100 }]);
    });

    it("the team's maxComputeSharePercent bounds the share: QUOTA_EXCEEDED, nothing written", async () => {
      assertError(
        await h.graphql(SET_POLICY, {
          teamId: team.id,
          input: { ...POLICY, maxComputeSharePercent: 101 },
        }),
        'BAD_USER_INPUT',
      );
      const set = assertOk(
        await h.graphql<{ setQuotaPolicy: { quotaPolicy: { maxComputeSharePercent: number } } }>(
          SET_POLICY,
          { teamId: team.id, input: { ...POLICY, maxComputeSharePercent: 30 } },
        ),
      );
      assert.equal(set.setQuotaPolicy.quotaPolicy.maxComputeSharePercent, 30);
      const before = await shardRowCounts(h);
      const refused = await create('too-much', { computeSharePercent: 40 });
      assertError(refused, 'QUOTA_EXCEEDED');
      assert.match(refused.errors![0]!.message, /over the team's limit of 30%/);
      assert.deepEqual(await shardRowCounts(h), before);
      assertOk(
        await h.graphql(SET_POLICY, {
          teamId: team.id,
          input: { ...POLICY, maxComputeSharePercent: 0 },
        }),
      );
      const none = await shardRowCounts(h);
      assertError(await create('none', { computeSharePercent: 10 }), 'QUOTA_EXCEEDED');
      assert.deepEqual(await shardRowCounts(h), none);
      assertOk(await h.graphql(SET_POLICY, { teamId: team.id, input: POLICY }));
    });

    it('setShardCompute changes a placed shard: checked like placement, sent to the agent, released with it', async () => {
      const shards = await h.prisma.shard.findMany({
        where: { teamId: team.id, state: 'PLACED' },
        orderBy: { name: 'asc' },
      });
      const [a, c, d] = shards;
      assert.deepEqual(
        shards.map((s) => s.name),
        ['a', 'c', 'd'],
      );
      // 60 + 40 = 100: a cannot grow, and nothing changes when it is refused.
      const refused = await h.graphql(SET_SHARD_COMPUTE, { id: a!.id, share: 70 }, team.member);
      assertError(refused, 'NO_CAPACITY');
      assert.equal(await guaranteed(), 1000);
      assertError(
        await h.graphql(SET_SHARD_COMPUTE, { id: a!.id, share: null, mode: 'CAPPED' }, team.member),
        'BAD_USER_INPUT',
      );
      assertError(
        await h.graphql(SET_SHARD_COMPUTE, { id: a!.id, share: 30 }, team.viewer),
        'FORBIDDEN',
      );

      const changed = assertOk(
        await h.graphql<{ setShardCompute: { computeSharePercent: number; computeMode: string } }>(
          SET_SHARD_COMPUTE,
          { id: a!.id, share: 30, mode: 'CAPPED' },
          team.member,
        ),
      ).setShardCompute;
      assert.deepEqual(changed, { id: a!.id, computeSharePercent: 30, computeMode: 'CAPPED' });
      assert.equal(await guaranteed(), 700);
      const resize = commands.forShard(a!.id).findLast((x) => x.type === 'resize');
      assert.ok(resize?.type === 'resize');
      assert.deepEqual(resize.compute, { sharePermille: 300, mode: 'capped' });
      assert.equal(resize.gpus[0]!.uuid, gpu);

      // Now c (no share) may take 30%.
      assertOk(await h.graphql(SET_SHARD_COMPUTE, { id: c!.id, share: 30 }, team.member));
      assert.equal(await guaranteed(), 1000);

      // A memory resize reopens the reservation with the same share.
      assertOk(
        await h.graphql(
          `mutation ($id: ID!) { resizeShard(id: $id, memoryPerGpu: "6g") { id } }`,
          { id: a!.id },
          team.member,
        ),
      );
      assert.equal(await guaranteed(), 1000);

      for (const shard of [a!, c!, d!]) {
        assertOk(
          await h.graphql(
            `mutation ($id: ID!) { deleteShard(id: $id) { id } }`,
            { id: shard.id },
            team.member,
          ),
        );
      }
      assert.equal(await guaranteed(), 0);
      assertError(
        await h.graphql(SET_SHARD_COMPUTE, { id: a!.id, share: 10 }, team.member),
        'CONFLICT',
      );
    });

    it('a request that fits by memory but not by compute waits as PENDING, and the queue places it once the share is free', async () => {
      const first = assertOk(await create('q1', { computeSharePercent: 70 })).createShard;
      const waiting = assertOk(
        await create('q2', { computeSharePercent: 50, queue: true }),
      ).createShard;
      assert.equal(waiting.state, 'PENDING');
      assert.equal(await guaranteed(), 700);
      assertOk(
        await h.graphql(
          `mutation ($id: ID!) { deleteShard(id: $id) { id } }`,
          { id: first.id },
          team.member,
        ),
      );
      await h.controlPlane.app.get(QueueService).admitNow();
      const placed = await h.prisma.shard.findUniqueOrThrow({ where: { id: waiting.id } });
      assert.equal(placed.state, 'PLACED');
      assert.equal(await guaranteed(), 500);
      const launch = commands.forShard(waiting.id).find((c) => c.type === 'launch');
      assert.ok(launch?.type === 'launch');
      assert.deepEqual(launch.spec.compute, { sharePermille: 500, mode: 'guaranteed' });
    });
  });
}

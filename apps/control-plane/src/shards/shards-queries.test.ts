import assert from 'node:assert/strict';
import { it } from 'node:test';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  MiB,
  shardRowCounts,
} from '../testing/fleet-fixtures.js';
import {
  describeShardsApi,
  SHARDS,
  STOP,
  PREVIEW,
  INJECTION,
} from '../testing/shards-api-fixtures.js';

/**
 * Reading shards: the shards list (filters, pages, each shard's GPUs) and placementPreview.
 */
describeShardsApi('queries', (api) => {
  it('shards: filters by team, state and host; pages newest first', async () => {
    const { h, registerPool } = api;
    await registerPool('list', ['list-1', 'list-2']);
    const lister = await createTestTeam(h, 'lister');
    const created: string[] = [];
    for (let i = 0; i < 3; i++) {
      created.push(
        assertOk(
          await createShard(h, lister.member, {
            hostSelector: [{ key: 'pool', value: 'list' }],
            memoryPerGpu: '70g',
          }),
        ).createShard.id,
      );
    }
    type Page = {
      shards: {
        edges: { cursor: string; node: { id: string; hostId: string; state: string } }[];
        pageInfo: { hasNextPage: boolean; endCursor: string };
      };
    };
    const page1 = assertOk(await h.graphql<Page>(SHARDS, { first: 2 }, lister.viewer)).shards;
    assert.deepEqual(
      page1.edges.map((e) => e.node.id),
      [created[2], created[1]],
    );
    assert.equal(page1.pageInfo.hasNextPage, true);
    const page2 = assertOk(
      await h.graphql<Page>(SHARDS, { first: 2, after: page1.pageInfo.endCursor }, lister.viewer),
    ).shards;
    assert.deepEqual(
      page2.edges.map((e) => e.node.id),
      [created[0]],
    );
    assert.equal(page2.pageInfo.hasNextPage, false);
    const onHost = assertOk(
      await h.graphql<Page>(SHARDS, { hostId: 'list-2' }, lister.viewer),
    ).shards;
    assert.equal(onHost.edges.length, 1);
    assertOk(await h.graphql(STOP, { id: created[0] }, lister.member));
    const stopping = assertOk(
      await h.graphql<Page>(SHARDS, { states: ['STOPPING'] }, lister.viewer),
    ).shards;
    assert.deepEqual(
      stopping.edges.map((e) => e.node.id),
      [created[0]],
    );
    const byAdmin = assertOk(
      await h.graphql<Page>(SHARDS, { teamId: lister.id, first: 10 }),
    ).shards;
    assert.equal(byAdmin.edges.length, 3);
    assertError(await h.graphql(SHARDS, { after: 'garbage' }, lister.viewer), 'BAD_USER_INPUT');
    assertError(await h.graphql(SHARDS, { teamId: INJECTION }, lister.viewer), 'BAD_USER_INPUT');
  });

  it('a page of shards gives each shard its own GPUs (read together for the page), as shard(id) does', async () => {
    const { h, registerPool } = api;
    await registerPool('gpu-list', ['gpu-list-1', 'gpu-list-2'], 4);
    const team = await createTestTeam(h, 'gpu-lister');
    const ids: string[] = [];
    for (const gpuCount of [2, 1, 3, 4]) {
      ids.push(
        assertOk(
          await createShard(h, team.member, {
            hostSelector: [{ key: 'pool', value: 'gpu-list' }],
            memoryPerGpu: '10g',
            gpuCount,
          }),
        ).createShard.id,
      );
    }
    type Gpus = { index: number; gpuUuid: string; reserved: { bytes: string } }[];
    const page = assertOk(
      await h.graphql<{
        shards: { edges: { node: { id: string; gpuCount: number; gpus: Gpus } }[] };
      }>(
        `query ($teamId: ID) { shards(teamId: $teamId) { edges { node { id gpuCount gpus { index gpuUuid reserved { bytes } } } } } }`,
        { teamId: team.id },
      ),
    ).shards.edges.map((edge) => edge.node);
    assert.deepEqual(
      page.map((shard) => shard.id),
      [...ids].reverse(),
    );
    for (const shard of page) {
      assert.equal(shard.gpus.length, shard.gpuCount, shard.id);
      const alone = assertOk(
        await h.graphql<{ shard: { gpus: Gpus } }>(
          `query ($id: ID!) { shard(id: $id) { gpus { index gpuUuid reserved { bytes } } } }`,
          { id: shard.id },
        ),
      ).shard.gpus;
      assert.deepEqual(shard.gpus, alone, shard.id);
      assert.deepEqual(
        shard.gpus.map((gpu) => gpu.index),
        [...shard.gpus.map((gpu) => gpu.index)].sort((a, b) => a - b),
      );
    }
  });

  it('placementPreview: where it would go, or every host with its reason; nothing reserved', async () => {
    const { h, alpha, beta, registerPool } = api;
    await registerPool('preview', ['preview-1']);
    const before = await shardRowCounts(h);
    const fits = assertOk(
      await h.graphql<{ placementPreview: Record<string, unknown> }>(
        PREVIEW,
        {
          input: {
            memoryPerGpu: '20g',
            gpuCount: 2,
            hostSelector: [{ key: 'pool', value: 'preview' }],
          },
        },
        alpha.viewer,
      ),
    ).placementPreview;
    assert.equal(fits['fits'], true);
    assert.equal(fits['hostId'], 'preview-1');
    assert.deepEqual(fits['reservedPerGpu'], {
      bytes: String(20 * GiB + 512 * MiB),
      human: '20.5 GiB',
    });
    assert.equal(fits['quotaProblem'], null);
    const no = assertOk(
      await h.graphql<{
        placementPreview: {
          fits: boolean;
          hosts: { hostId: string; kind: string; reason: string }[];
        };
      }>(
        PREVIEW,
        { input: { memoryPerGpu: '79.75g', gpuCount: 2, gpuModelInclude: ['H100'] } },
        alpha.viewer,
      ),
    ).placementPreview;
    assert.equal(no.fits, false);
    assert.equal(no.hosts.length, await h.prisma.host.count());
    const l4 = no.hosts.find((host) => host.hostId === 'base-l4');
    assert.equal(l4?.kind, 'model-excluded');
    const preview = no.hosts.find((host) => host.hostId === 'preview-1');
    assert.equal(preview?.kind, 'not-enough-gpus');
    assert.match(preview?.reason ?? '', /80.25 GiB free each/);
    const quota = assertOk(
      await h.graphql<{ placementPreview: { quotaProblem: string } }>(
        PREVIEW,
        { input: { memoryPerGpu: '2t' } },
        alpha.viewer,
      ),
    ).placementPreview;
    assert.match(quota.quotaProblem, /per shard/);
    assertError(
      await h.graphql(PREVIEW, { input: { memoryPerGpu: '1kb' } }, alpha.viewer),
      'BAD_USER_INPUT',
    );
    assertError(
      await h.graphql(PREVIEW, { input: { memoryPerGpu: '1g', teamId: beta.id } }, alpha.viewer),
      'NOT_FOUND',
    );
    assert.deepEqual(await shardRowCounts(h), before);
  });
});

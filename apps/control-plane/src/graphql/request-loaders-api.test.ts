import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import {
  assertOk,
  createShard,
  createTestTeam,
  registerRequest,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { readsOf, recordStatements } from '../testing/statement-recorder.js';

/**
 * Per-request DataLoaders (issue 15 §2): a page of shards with each one's host, team and GPUs
 * reads each of those tables a bounded number of times, not once per shard; and nothing is
 * kept between requests.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const HOSTS = 4;
const TEAMS = 3;
const SHARDS_PER_TEAM = 8;

const PAGE = `{ shards(first: 100) { edges { node {
  id teamId hostId
  team { id name }
  host { id name gpus { uuid } }
  gpus { gpuUuid index }
} } } }`;

interface PageNode {
  id: string;
  teamId: string;
  hostId: string | null;
  team: { id: string; name: string };
  host: { id: string; name: string; gpus: { uuid: string }[] } | null;
  gpus: { gpuUuid: string; index: number }[];
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`per-request loaders on ${kind}`, () => {
    let h: ApiTestHarness;
    const teams: TestTeam[] = [];

    before(async () => {
      h = await startApiTestHarness(kind, postgres ? { server: postgres } : {});
      const reports = h.controlPlane.app.get(AgentReportsService);
      for (let i = 0; i < HOSTS; i++) {
        await reports.registerHost(registerRequest(`load-${i}`, { gpus: 4 }));
      }
      for (let t = 0; t < TEAMS; t++) teams.push(await createTestTeam(h, `loaders-${t}`));
      for (const team of teams) {
        for (let s = 0; s < SHARDS_PER_TEAM; s++) {
          assertOk(
            await createShard(h, team.member, {
              name: `s${s}`,
              memoryPerGpu: '1g',
              placementPolicy: 'SPREAD',
            }),
          );
        }
      }
    });
    after(async () => {
      await h.close();
    });

    it('a page of N shards with hosts, teams and GPUs reads each table once, not N times', async (t) => {
      const { result, statements } = await recordStatements(h.prisma, () =>
        h.graphql<{ shards: { edges: { node: PageNode }[] } }>(PAGE),
      );
      const nodes = assertOk(result).shards.edges.map((edge) => edge.node);
      const shardCount = TEAMS * SHARDS_PER_TEAM;
      assert.equal(nodes.length, shardCount);
      const hostsSeen = new Set(nodes.map((node) => node.hostId));
      assert.ok(hostsSeen.size > 1, 'the shards are spread over several hosts');
      t.diagnostic(`${statements.length} statements for ${shardCount} shards`);
      for (const node of nodes) {
        assert.equal(node.team.id, node.teamId);
        assert.equal(node.host?.id, node.hostId);
        assert.ok(node.host.gpus.length === 4);
        assert.equal(node.gpus.length, 1, JSON.stringify(node));
        assert.ok(node.host.gpus.some((gpu) => gpu.uuid === node.gpus[0]!.gpuUuid));
      }
      // One read each for the page, its teams, its hosts (with their GPUs) and its GPU
      // reservations; background sweepers may add a few of their own, never one per shard.
      assert.equal(readsOf(statements, 'team').length, 1, statements.join('\n'));
      assert.equal(readsOf(statements, 'shard_gpu').length, 1, statements.join('\n'));
      assert.ok(readsOf(statements, 'host').length <= 2, statements.join('\n'));
      assert.ok(readsOf(statements, 'shard').length <= 2, statements.join('\n'));
      assert.ok(
        statements.length < shardCount / 2,
        `${statements.length} statements for ${shardCount} shards:\n${statements.join('\n')}`,
      );
    });

    it('hosts with their shards: one shard query for N hosts, each page as shards(hostId) pages it', async (t) => {
      const hostsWithShards = (first: number) => `{ hosts(first: 10) { edges { node {
        id
        shards(first: ${first}) { edges { cursor node { id hostId teamId state } } pageInfo { hasNextPage endCursor } }
        running: shards(first: 20, states: [RUNNING, PLACED]) { edges { node { id } } }
      } } } }`;
      type HostPage = {
        edges: { cursor: string; node: { id: string; hostId: string; state: string } }[];
        pageInfo: { hasNextPage: boolean; endCursor: string | null };
      };
      type HostNode = {
        id: string;
        shards: HostPage;
        running: { edges: { node: { id: string } }[] };
      };
      const onHost = async (hostId: string, first: number, token?: string) =>
        assertOk(
          await h.graphql<{ shards: HostPage }>(
            `query ($hostId: ID!, $first: Int!) { shards(hostId: $hostId, first: $first) {
              edges { cursor node { id hostId teamId state } } pageInfo { hasNextPage endCursor } } }`,
            { hostId, first },
            token,
          ),
        ).shards;

      for (const first of [20, 2]) {
        const { result, statements } = await recordStatements(h.prisma, () =>
          h.graphql<{ hosts: { edges: { node: HostNode }[] } }>(hostsWithShards(first)),
        );
        const hosts = assertOk(result).hosts.edges.map((edge) => edge.node);
        assert.equal(hosts.length, HOSTS);
        t.diagnostic(
          `${statements.length} statements for ${HOSTS} hosts' shards (first: ${first})`,
        );
        // One query per field (shards, running) for all the hosts; background sweepers may
        // add one of their own, never one per host.
        assert.ok(readsOf(statements, 'shard').length <= 3, statements.join('\n'));
        let listed = 0;
        for (const host of hosts) {
          assert.deepEqual(host.shards, await onHost(host.id, first), `host ${host.id}`);
          assert.deepEqual(
            host.running.edges.map((edge) => edge.node.id),
            (await onHost(host.id, 100)).edges
              .filter((edge) => ['RUNNING', 'PLACED'].includes(edge.node.state))
              .map((edge) => edge.node.id),
          );
          listed += host.shards.edges.length;
        }
        if (first === 20) assert.equal(listed, TEAMS * SHARDS_PER_TEAM);
        else assert.ok(hosts.some((host) => host.shards.pageInfo.hasNextPage));
      }

      // The next page of one host, and a team token seeing its own shards only.
      const team = teams[1]!;
      const firstPages = assertOk(
        await h.graphql<{ hosts: { edges: { node: HostNode }[] } }>(
          hostsWithShards(1),
          {},
          team.viewer,
        ),
      ).hosts.edges.map((edge) => edge.node);
      for (const host of firstPages) {
        assert.deepEqual(host.shards, await onHost(host.id, 1, team.viewer));
        assert.ok(host.shards.edges.every((edge) => edge.node.hostId === host.id));
      }
      const paged = firstPages.find((host) => host.shards.pageInfo.hasNextPage);
      assert.ok(paged, "a host with more than two of the team's shards");
      const next = assertOk(
        await h.graphql<{ host: { shards: HostPage } }>(
          `query ($id: ID!, $after: String) { host(id: $id) { shards(first: 1, after: $after) {
            edges { cursor node { id hostId teamId state } } pageInfo { hasNextPage endCursor } } } }`,
          { id: paged.id, after: paged.shards.pageInfo.endCursor },
          team.viewer,
        ),
      ).host.shards;
      const all = await onHost(paged.id, 100, team.viewer);
      assert.deepEqual(
        next.edges.map((edge) => edge.node.id),
        all.edges.slice(1, 2).map((edge) => edge.node.id),
      );
    });

    it('the loaders belong to one request: the next request reads again and sees changes', async () => {
      const team = teams[0]!;
      const first = await recordStatements(h.prisma, () =>
        h.graphql<{ shards: { edges: { node: PageNode }[] } }>(PAGE, {}, team.viewer),
      );
      assert.equal(readsOf(first.statements, 'team').length, 1);
      const before = assertOk(first.result).shards.edges.map((edge) => edge.node);
      assert.equal(before.length, SHARDS_PER_TEAM, 'a team token sees its own shards only');
      assert.ok(before.every((node) => node.teamId === team.id && node.team.id === team.id));

      await h.prisma.team.update({ where: { id: team.id }, data: { name: 'loaders-renamed' } });
      const second = await recordStatements(h.prisma, () =>
        h.graphql<{ shards: { edges: { node: PageNode }[] } }>(PAGE, {}, team.viewer),
      );
      assert.equal(readsOf(second.statements, 'team').length, 1);
      const after = assertOk(second.result).shards.edges.map((edge) => edge.node);
      assert.ok(after.every((node) => node.team.name === 'loaders-renamed'));
    });
  });
}

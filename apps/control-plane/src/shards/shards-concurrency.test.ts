import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import {
  postGraphql,
  startApiTestHarness,
  type ApiTestHarness,
  type GraphqlResponse,
} from '../testing/api-test-harness.js';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import {
  CREATE_SHARD,
  createTestTeam,
  GiB,
  registerRequest,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startControlPlaneChild, type ControlPlaneChild } from '../testing/control-plane-child.js';
import { startPostgres, type PostgresServer } from '../testing/index.js';
import { DELETE } from '../testing/shards-api-fixtures.js';

/**
 * Two control-plane processes on one PostgreSQL take 2,000 concurrent createShard calls for a
 * fleet that fits exactly 1,000 shards. The numbers make every outcome exact:
 *
 * - 100 hosts × 2 GPUs × 20 GiB, context overhead 512 MiB; every shard asks 3.5 GiB on one GPU,
 *   so it reserves 4 GiB and each GPU takes exactly 5: 1,000 in all.
 * - Pool "quota" (25 hosts: 250 shards) is used by five teams limited to 50 shards each (two
 *   by maxShards, three by maxTotal = 50 × 3.5 GiB). Their quotas add up to the pool, so each
 *   gets exactly 50 and QUOTA_EXCEEDED for its other 150, never NO_CAPACITY.
 * - Pool "open" (75 hosts: 750 shards) is used by five teams without a binding quota that ask
 *   for 1,000: exactly 750 placed and 250 NO_CAPACITY.
 */

const HOSTS = 100;
const QUOTA_POOL_HOSTS = 25;
const REQUESTS_PER_TEAM = 200;
const SHARD_SIZE = '3.5g';
const PER_TEAM_LIMIT = 50;
const HOST_OFFLINE_SECONDS = 86_400;

describe('two control planes on one PostgreSQL', { timeout: 600_000 }, () => {
  let postgres: PostgresServer;
  let h: ApiTestHarness;
  const children: ControlPlaneChild[] = [];
  const dataDirs: string[] = [];
  const quotaTeams: TestTeam[] = [];
  const openTeams: TestTeam[] = [];

  before(async () => {
    postgres = await startPostgres();
    h = await startApiTestHarness('postgres', {
      server: postgres,
      controlPlane: { hostOfflineSeconds: HOST_OFFLINE_SECONDS },
    });
    const fleet = h.controlPlane.app.get(AgentReportsService);
    for (let i = 0; i < HOSTS; i++) {
      const pool = i < QUOTA_POOL_HOSTS ? 'quota' : 'open';
      const id = `host-${String(i).padStart(3, '0')}`;
      await fleet.registerHost(
        registerRequest(id, { gpus: 2, gpuBytes: 20 * GiB, labels: { pool } }),
      );
    }
    for (let i = 0; i < 5; i++) {
      quotaTeams.push(
        await createTestTeam(
          h,
          `quota-${i}`,
          i < 2
            ? { maxShards: PER_TEAM_LIMIT }
            : { maxTotal: `${PER_TEAM_LIMIT * 3.5}g`, maxPerShard: '4g', maxShards: 10_000 },
        ),
      );
      openTeams.push(await createTestTeam(h, `open-${i}`));
    }
    const url = h.controlPlane.config.database.url!;
    for (let i = 0; i < 2; i++) dataDirs.push(await mkdtemp(join(tmpdir(), 'gpushards-cp-child-')));
    children.push(
      ...(await Promise.all(
        dataDirs.map((dir) =>
          // No agent heartbeats here: hosts must not go OFFLINE while the test runs.
          startControlPlaneChild(url, dir, {
            GPUSHARDS_HOST_OFFLINE_SECONDS: String(HOST_OFFLINE_SECONDS),
          }),
        ),
      )),
    );
  });

  after(async () => {
    await Promise.all(children.map((child) => child.stop()));
    await h?.close();
    await postgres?.stop();
    await Promise.all(dataDirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });

  it('2,000 concurrent createShard: exactly 1,000 placed, no GPU past capacity, no team past quota', async (t) => {
    const calls: { team: TestTeam; pool: string; child: ControlPlaneChild }[] = [];
    for (let round = 0; round < REQUESTS_PER_TEAM; round++) {
      for (const [pool, teams] of [
        ['quota', quotaTeams],
        ['open', openTeams],
      ] as const) {
        for (const team of teams) calls.push({ team, pool, child: children[calls.length % 2]! });
      }
    }
    const started = performance.now();
    const responses = await Promise.all(
      calls.map(({ team, pool, child }, i) =>
        postGraphql<{ createShard: { id: string; teamId: string } }>(
          child.graphqlUrl,
          CREATE_SHARD,
          {
            input: {
              name: `s-${i}`,
              image: 'ghcr.io/org/worker:1',
              memoryPerGpu: SHARD_SIZE,
              hostSelector: [{ key: 'pool', value: pool }],
              // Placement or NO_CAPACITY at once: this test is about the conditional update.
              queue: false,
            },
          },
          team.member,
        ),
      ),
    );
    t.diagnostic(`2,000 calls answered in ${Math.round(performance.now() - started)} ms`);
    const outcome = (r: GraphqlResponse) => r.errors?.[0]?.extensions?.code ?? 'OK';
    const tally = (teams: TestTeam[]) => {
      const counts: Record<string, number> = {};
      responses.forEach((r, i) => {
        if (!teams.includes(calls[i]!.team)) return;
        counts[outcome(r)] = (counts[outcome(r)] ?? 0) + 1;
      });
      return counts;
    };
    const unexpected = responses.filter(
      (r) => !['OK', 'QUOTA_EXCEEDED', 'NO_CAPACITY'].includes(outcome(r)),
    );
    assert.deepEqual(
      unexpected.slice(0, 3),
      [],
      `only placements, quota and capacity refusals; logged: ${children.flatMap((c) => c.errors.slice(0, 2)).join('\n')}`,
    );
    assert.deepEqual(tally(quotaTeams), { OK: 250, QUOTA_EXCEEDED: 750 });
    assert.deepEqual(tally(openTeams), { OK: 750, NO_CAPACITY: 250 });
    for (const team of quotaTeams) {
      const placed = responses.filter((r, i) => calls[i]!.team === team && outcome(r) === 'OK');
      assert.equal(placed.length, PER_TEAM_LIMIT, 'each quota team gets exactly its limit');
    }

    const [overfull] = await h.prisma.$queryRaw<{ n: number }[]>`
      SELECT count(*)::int AS n FROM gpu WHERE reserved_bytes > floor(total_bytes * overcommit_ratio)`;
    assert.equal(overfull!.n, 0, 'no GPU past capacity');
    const [consistent] = await h.prisma.$queryRaw<{ n: number }[]>`
      SELECT count(*)::int AS n FROM gpu
       WHERE reserved_bytes <> coalesce((SELECT sum(reserved_bytes) FROM shard_gpu
                                          WHERE gpu_uuid = gpu.uuid AND released_at IS NULL), 0)`;
    assert.equal(
      consistent!.n,
      0,
      "every GPU's reserved bytes are the sum of its live reservations",
    );
    const [full] = await h.prisma.$queryRaw<{ n: number }[]>`
      SELECT count(*)::int AS n FROM gpu WHERE reserved_bytes = ${4n * BigInt(GiB) * 5n}`;
    assert.equal(full!.n, HOSTS * 2, 'every GPU holds exactly 5 shards');
    assert.equal(await h.prisma.shard.count(), 1000);
    const perTeam = await h.prisma.shard.groupBy({ by: ['teamId'], _count: { _all: true } });
    for (const team of quotaTeams) {
      assert.equal(perTeam.find((t) => t.teamId === team.id)?._count._all, PER_TEAM_LIMIT);
    }
    assert.equal(await h.prisma.auditEvent.count({ where: { action: 'shard.create' } }), 1000);
  });

  it('one team from both processes while its shards are deleted: never past its quota, and refilled to it exactly', async () => {
    // Each quota team holds its limit (the test above). Both processes delete 20 of each
    // team's shards while both create 60 more for it; a batch decided on a read from before a
    // commit of the other process (or of a delete) must still leave the team within its quota.
    // Then 30 more each: every team ends exactly at its limit, so no create was refused wrongly
    // for good either.
    const DELETED = 20;
    const create = (team: TestTeam, i: number, name: string) =>
      postGraphql<{ createShard: { id: string } }>(
        children[i % 2]!.graphqlUrl,
        CREATE_SHARD,
        {
          input: {
            name,
            image: 'ghcr.io/org/worker:1',
            memoryPerGpu: SHARD_SIZE,
            hostSelector: [{ key: 'pool', value: 'quota' }],
            queue: false,
          },
        },
        team.member,
      );
    const outcome = (r: GraphqlResponse) => r.errors?.[0]?.extensions?.code ?? 'OK';
    const live = async (team: TestTeam) =>
      h.prisma.shard.count({ where: { teamId: team.id, state: { not: 'DELETED' } } });
    const calls: Promise<GraphqlResponse>[] = [];
    for (const team of quotaTeams) {
      const held = await h.prisma.shard.findMany({
        where: { teamId: team.id },
        select: { id: true },
        take: DELETED,
      });
      held.forEach(({ id }, i) =>
        calls.push(postGraphql(children[i % 2]!.graphqlUrl, DELETE, { id }, team.member)),
      );
      for (let i = 0; i < 60; i++) calls.push(create(team, i, `again-${team.id}-${i}`));
    }
    const first = await Promise.all(calls);
    const failed = first.filter(
      (r) => !['OK', 'QUOTA_EXCEEDED', 'NO_CAPACITY'].includes(outcome(r)),
    );
    assert.deepEqual(
      failed.slice(0, 3),
      [],
      'only placements, deletes, quota and capacity refusals',
    );
    for (const team of quotaTeams) {
      assert.ok((await live(team)) <= PER_TEAM_LIMIT, `team ${team.id} within its quota`);
    }
    const fill: Promise<GraphqlResponse>[] = [];
    for (const team of quotaTeams) {
      for (let i = 0; i < 30; i++) fill.push(create(team, i, `fill-${team.id}-${i}`));
    }
    const second = await Promise.all(fill);
    assert.deepEqual(
      second.filter((r) => !['OK', 'QUOTA_EXCEEDED'].includes(outcome(r))).slice(0, 3),
      [],
      'the refill finds room for every create its quota allows',
    );
    for (const team of quotaTeams) {
      assert.equal(await live(team), PER_TEAM_LIMIT, `team ${team.id} back exactly at its quota`);
    }
    const [overfull] = await h.prisma.$queryRaw<{ n: number }[]>`
      SELECT count(*)::int AS n FROM gpu WHERE reserved_bytes > floor(total_bytes * overcommit_ratio)`;
    assert.equal(overfull!.n, 0, 'no GPU past capacity');
    const [consistent] = await h.prisma.$queryRaw<{ n: number }[]>`
      SELECT count(*)::int AS n FROM gpu
       WHERE reserved_bytes <> coalesce((SELECT sum(reserved_bytes) FROM shard_gpu
                                          WHERE gpu_uuid = gpu.uuid AND released_at IS NULL), 0)`;
    assert.equal(
      consistent!.n,
      0,
      "every GPU's reserved bytes are the sum of its live reservations",
    );
  });
});

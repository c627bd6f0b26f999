import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { bytes, COMPUTE_MODES, computeShareFits, GiB, gpuUuid, hostId } from '@gpushards/limits';
import fc from 'fast-check';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { applyPlacements, StalePlan } from '../queue/apply-placements.js';
import { QueueService } from '../queue/queue.service.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
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

/**
 * ISOLATED compute shards (issue 17) in the API: a host's MPS partition from its registration,
 * placement within it and beside it, the launch spec, a fixed share, release, the queue.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const DELETE = `mutation ($id: ID!) { deleteShard(id: $id) { id } }`;
const HOST = `query ($id: ID!) {
  host(id: $id) {
    computeIsolatedPoolPercent
    gpus { computeIsolatedPoolPercent computeIsolatedPercent computeGuaranteedPercent }
  }
}`;

/** A host with a 50% partition, and one without. */
const ISOLATED_HOST = 'iso-1';
const PLAIN_HOST = 'plain-1';

for (const kind of TEST_DATABASE_KINDS) {
  describe(`isolated compute shards on ${kind}`, () => {
    let h: ApiTestHarness;
    let team: TestTeam;
    const commands = new FakeShardCommands();
    const gpu = gpuUuidOf(ISOLATED_HOST, 0);

    /**
     * The GPU's columns, checked against its live reservations: the guaranteed total is their
     * shares, the isolated total the shares of the ISOLATED shards among them.
     */
    const columns = async (uuid = gpu) => {
      const row = await h.prisma.gpu.findUniqueOrThrow({ where: { uuid } });
      const live = await h.prisma.shardGpu.findMany({
        where: { gpuUuid: uuid, releasedAt: null },
        include: { shard: { select: { computeMode: true } } },
      });
      const sum = (list: typeof live) => list.reduce((n, r) => n + r.computeSharePermille, 0);
      assert.equal(row.guaranteedComputePermille, sum(live));
      assert.equal(
        row.isolatedComputePermille,
        sum(live.filter((r) => r.shard.computeMode === 'ISOLATED')),
      );
      return {
        guaranteed: row.guaranteedComputePermille,
        isolated: row.isolatedComputePermille,
        pool: row.isolatedPoolPermille,
      };
    };
    const create = (name: string, input: Record<string, unknown>, on = 'iso') =>
      createShard(h, team.member, {
        name,
        memoryPerGpu: '4g',
        hostSelector: [{ key: 'pool', value: on }],
        ...input,
      });
    const register = (pool: number | undefined) => {
      const request = registerRequest(ISOLATED_HOST, { gpus: 1, labels: { pool: 'iso' } });
      return h.controlPlane.app.get(AgentReportsService).registerHost({
        ...request,
        host: {
          ...request.host,
          ...(pool === undefined ? {} : { isolatedComputePermille: pool }),
        },
      });
    };
    const launchOf = (id: string) => {
      const launch = commands.forShard(id).find((c) => c.type === 'launch');
      assert.ok(launch?.type === 'launch');
      return launch.spec;
    };
    const remove = async (id: string) => {
      assertOk(await h.graphql(DELETE, { id }, team.member));
    };

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { shardCommands: commands, logLevel: 'error' },
      });
      await register(500);
      await h.controlPlane.app
        .get(AgentReportsService)
        .registerHost(registerRequest(PLAIN_HOST, { gpus: 1, labels: { pool: 'plain' } }));
      team = await createTestTeam(h, 'isolated-team');
    });
    after(async () => {
      await h?.close();
    });

    it('the conditional updates check the fit rule of libs/limits (gpu_compute_fits)', async () => {
      const cases = fc.sample(
        fc.record({
          a: fc.integer({ min: 0, max: 1000 }),
          b: fc.integer({ min: 0, max: 1000 }),
          pool: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 900 })),
          share: fc.integer({ min: 1, max: 1000 }),
          mode: fc.constantFrom(...COMPUTE_MODES),
        }),
        { numRuns: 2000, seed: 17 },
      );
      const column = (pick: (c: (typeof cases)[0]) => number) => cases.map(pick);
      const rows = await h.prisma.$queryRaw<{ fits: boolean }[]>`
        SELECT gpu_compute_fits(g, i, p, added, added_isolated) AS fits
          FROM unnest(${column((c) => Math.max(c.a, c.b))}::int[],
                      ${column((c) => Math.min(c.a, c.b))}::int[], ${column((c) => c.pool)}::int[],
                      ${column((c) => c.share)}::int[],
                      ${column((c) => (c.mode === 'ISOLATED' ? c.share : 0))}::int[])
               WITH ORDINALITY AS c(g, i, p, added, added_isolated, n)
         ORDER BY n`;
      assert.equal(rows.length, cases.length);
      cases.forEach((c, n) => {
        const load = {
          guaranteedComputePermille: Math.max(c.a, c.b),
          isolatedComputePermille: Math.min(c.a, c.b),
          isolatedPoolPermille: c.pool,
        };
        assert.equal(rows[n]!.fits, computeShareFits(load, c.share, c.mode), JSON.stringify(c));
      });
    });

    it("a host's partition comes from its registration and shows as percentages", async () => {
      assert.deepEqual(await columns(), { guaranteed: 0, isolated: 0, pool: 500 });
      const iso = assertOk(
        await h.graphql<{ host: unknown }>(HOST, { id: ISOLATED_HOST }, team.viewer),
      );
      assert.deepEqual(iso.host, {
        computeIsolatedPoolPercent: 50,
        gpus: [
          {
            computeIsolatedPoolPercent: 50,
            computeIsolatedPercent: 0,
            computeGuaranteedPercent: 0,
          },
        ],
      });
      const plain = assertOk(await h.graphql<{ host: unknown }>(HOST, { id: PLAIN_HOST }));
      assert.deepEqual(plain.host, {
        computeIsolatedPoolPercent: 0,
        gpus: [
          { computeIsolatedPoolPercent: 0, computeIsolatedPercent: 0, computeGuaranteedPercent: 0 },
        ],
      });
    });

    it('ISOLATED needs a share, and a host with a partition: refused otherwise, nothing written', async () => {
      const before = await shardRowCounts(h);
      const noShare = await create('no-share', { computeMode: 'ISOLATED' });
      assertError(noShare, 'BAD_USER_INPUT');
      assert.match(JSON.stringify(noShare.errors), /input\.computeMode/);

      for (const queue of [false, true]) {
        const refused = await create(
          'no-partition',
          {
            computeSharePercent: 30,
            computeMode: 'ISOLATED',
            queue,
          },
          'plain',
        );
        assertError(refused, 'NO_CAPACITY', `queue: ${queue}`);
        assert.match(refused.errors![0]!.message, /no isolated \(MPS\) partition/);
      }
      // The same share in another mode fits there.
      const guaranteed = assertOk(
        await create('plain-guaranteed', { computeSharePercent: 30 }, 'plain'),
      ).createShard;
      await remove(guaranteed.id);
      assert.equal((await shardRowCounts(h)).shards, before.shards + 1);
      assert.deepEqual(await columns(gpuUuidOf(PLAIN_HOST, 0)), {
        guaranteed: 0,
        isolated: 0,
        pool: 0,
      });
    });

    it('within a 50% partition: ISOLATED 30 fits, 30 more does not, GUARANTEED 60 does not, 40 does', async () => {
      const a = assertOk(
        await create('iso-a', { computeSharePercent: 30, computeMode: 'ISOLATED' }),
      ).createShard;
      assert.equal(a.hostId, ISOLATED_HOST);
      assert.deepEqual(launchOf(a.id).compute, { sharePermille: 300, mode: 'isolated' });
      assert.deepEqual(await columns(), { guaranteed: 300, isolated: 300, pool: 500 });

      const before = await shardRowCounts(h);
      const second = await create('iso-b', { computeSharePercent: 30, computeMode: 'ISOLATED' });
      assertError(second, 'NO_CAPACITY');
      assert.match(second.errors![0]!.message, /30% of the isolated partition/);
      const big = await create('g-60', { computeSharePercent: 60 });
      assertError(big, 'NO_CAPACITY');
      assert.match(big.errors![0]!.message, /with 50% compute/);
      assert.deepEqual(await shardRowCounts(h), before, 'nothing written');
      assert.deepEqual(await columns(), { guaranteed: 300, isolated: 300, pool: 500 });

      const b = assertOk(await create('g-40', { computeSharePercent: 40 })).createShard;
      assert.deepEqual(launchOf(b.id).compute, { sharePermille: 400, mode: 'guaranteed' });
      assert.deepEqual(await columns(), { guaranteed: 700, isolated: 300, pool: 500 });
      const read = assertOk(
        await h.graphql<{ host: { gpus: unknown[] } }>(HOST, { id: ISOLATED_HOST }),
      );
      assert.deepEqual(read.host.gpus, [
        {
          computeIsolatedPoolPercent: 50,
          computeIsolatedPercent: 30,
          computeGuaranteedPercent: 70,
        },
      ]);
    });

    it("an isolated shard's share is fixed while it holds its GPUs; the others stay within the rest", async () => {
      const shards = await h.prisma.shard.findMany({
        where: { teamId: team.id, state: 'PLACED' },
        orderBy: { name: 'asc' },
      });
      assert.deepEqual(
        shards.map((s) => s.name),
        ['g-40', 'iso-a'],
      );
      const [other, isoShard] = shards as [(typeof shards)[0], (typeof shards)[0]];
      for (const change of [
        { share: 20, mode: 'ISOLATED' },
        { share: 40, mode: 'ISOLATED' },
        { share: 30, mode: 'GUARANTEED' },
      ]) {
        const refused = await h.graphql(
          SET_SHARD_COMPUTE,
          { id: isoShard.id, ...change },
          team.member,
        );
        assertError(refused, 'CONFLICT', JSON.stringify(change));
        assert.match(refused.errors![0]!.message, /fixed while it holds its GPUs/);
        assert.match(refused.errors![0]!.message, /stop it and start it with the new share/);
      }
      const becomes = await h.graphql(
        SET_SHARD_COMPUTE,
        { id: other.id, share: 10, mode: 'ISOLATED' },
        team.member,
      );
      assertError(becomes, 'CONFLICT');
      assert.deepEqual(await columns(), { guaranteed: 700, isolated: 300, pool: 500 });
      assert.equal(
        commands.forShard(isoShard.id).filter((c) => c.type === 'resize').length +
          commands.forShard(other.id).filter((c) => c.type === 'resize').length,
        0,
      );

      // The GUARANTEED shard may grow to what the partition leaves (50%), not past it.
      const over = await h.graphql(SET_SHARD_COMPUTE, { id: other.id, share: 60 }, team.member);
      assertError(over, 'NO_CAPACITY');
      assert.match(
        over.errors![0]!.message,
        /would pass 50% \(what its host's 50% isolated partition leaves\)/,
      );
      assertOk(await h.graphql(SET_SHARD_COMPUTE, { id: other.id, share: 50 }, team.member));
      assert.deepEqual(await columns(), { guaranteed: 800, isolated: 300, pool: 500 });
    });

    it('releasing lowers both columns; a smaller partition at a new registration keeps what runs', async () => {
      const shards = await h.prisma.shard.findMany({
        where: { teamId: team.id, state: 'PLACED' },
      });
      const isoShard = shards.find((s) => s.name === 'iso-a')!;
      const other = shards.find((s) => s.name === 'g-40')!;

      // The agent registers again with a 20% partition while 30% isolated runs: accepted.
      await register(200);
      assert.deepEqual(await columns(), { guaranteed: 800, isolated: 300, pool: 200 });
      const refused = await create('iso-c', { computeSharePercent: 10, computeMode: 'ISOLATED' });
      assertError(refused, 'NO_CAPACITY');

      await remove(isoShard.id);
      assert.deepEqual(await columns(), { guaranteed: 500, isolated: 0, pool: 200 });
      await remove(other.id);
      assert.deepEqual(await columns(), { guaranteed: 0, isolated: 0, pool: 200 });

      // Without the field: no partition.
      await register(undefined);
      assert.deepEqual(await columns(), { guaranteed: 0, isolated: 0, pool: 0 });
      await register(500);
    });

    it('the queue places an ISOLATED shard within the partition once it has room', async () => {
      const full = assertOk(
        await create('iso-full', { computeSharePercent: 50, computeMode: 'ISOLATED' }),
      ).createShard;
      assert.deepEqual(await columns(), { guaranteed: 500, isolated: 500, pool: 500 });
      const waiting = assertOk(
        await create('iso-wait', { computeSharePercent: 20, computeMode: 'ISOLATED', queue: true }),
      ).createShard;
      assert.equal(waiting.state, 'PENDING');
      // A GUARANTEED shard beside the partition does not wait.
      const beside = assertOk(await create('g-beside', { computeSharePercent: 50 })).createShard;
      assert.equal(beside.state, 'PLACED');
      await h.controlPlane.app.get(QueueService).admitNow();
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: waiting.id } })).state,
        'PENDING',
      );
      assert.deepEqual(await columns(), { guaranteed: 1000, isolated: 500, pool: 500 });

      await remove(full.id);
      await h.controlPlane.app.get(QueueService).admitNow();
      const placed = await h.prisma.shard.findUniqueOrThrow({ where: { id: waiting.id } });
      assert.equal(placed.state, 'PLACED');
      assert.equal(placed.hostId, ISOLATED_HOST);
      assert.deepEqual(await columns(), { guaranteed: 700, isolated: 200, pool: 500 });
      assert.deepEqual(launchOf(waiting.id).compute, { sharePermille: 200, mode: 'isolated' });
      await remove(waiting.id);
      await remove(beside.id);
      assert.deepEqual(await columns(), { guaranteed: 0, isolated: 0, pool: 500 });
    });

    it('a plan made on a stale view of the GPU is checked again at commit', async () => {
      // The queue's placements: a plan that puts an ISOLATED shard into a full partition fails.
      const full = assertOk(
        await create('iso-full-2', { computeSharePercent: 50, computeMode: 'ISOLATED' }),
      ).createShard;
      const waiting = assertOk(
        await create('iso-wait-2', {
          computeSharePercent: 20,
          computeMode: 'ISOLATED',
          queue: true,
        }),
      ).createShard;
      assert.equal(waiting.state, 'PENDING');
      const lifecycle = h.controlPlane.app.get(ShardLifecycle);
      const placed = {
        kind: 'placed' as const,
        hostId: hostId(ISOLATED_HOST),
        gpuUuids: [gpuUuid(gpu)],
        bytesPerGpu: bytes(4 * GiB),
        reservedBytesPerGpu: bytes(4.5 * GiB),
      };
      await assert.rejects(
        h.prisma.$transaction((tx) =>
          applyPlacements(
            tx,
            lifecycle,
            [{ shardId: waiting.id, placed, guaranteed: false }],
            new CommitEffects(),
          ),
        ),
        StalePlan,
      );
      assert.deepEqual(await columns(), { guaranteed: 500, isolated: 500, pool: 500 });
      await remove(waiting.id);
      await remove(full.id);

      // createShard: another control plane filled the partition, behind this one's fleet cache.
      const fill = (permille: number) => h.prisma.$executeRaw`
        UPDATE gpu SET guaranteed_compute_permille = guaranteed_compute_permille + ${permille}::int,
                       isolated_compute_permille = isolated_compute_permille + ${permille}::int
         WHERE uuid = ${gpu}`;
      await fill(400);
      try {
        const before = await shardRowCounts(h);
        const refused = await create('iso-stale', {
          computeSharePercent: 20,
          computeMode: 'ISOLATED',
        });
        assertError(refused, 'NO_CAPACITY');
        assert.deepEqual(await shardRowCounts(h), before);
        assert.equal(
          (await h.prisma.gpu.findUniqueOrThrow({ where: { uuid: gpu } })).isolatedComputePermille,
          400,
        );
      } finally {
        await fill(-400);
      }
      assert.deepEqual(await columns(), { guaranteed: 0, isolated: 0, pool: 500 });
    });
  });
}

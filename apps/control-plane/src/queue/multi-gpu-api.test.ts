import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import {
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  MiB,
  registerRequest,
  stateEvent,
  type ShardResult,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import { RESIZE } from '../testing/shards-api-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { QueueService } from './queue.service.js';

/**
 * A 2-GPU shard on a simulated host of two cards, through resize and reclaim, on PostgreSQL and
 * on PGlite: at every step each card's reservation is the sum of the open reservations on it,
 * and the shard holds both of its cards or neither.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const SHARD = `query ($id: ID!) { shard(id: $id) { id state hostId gpus { gpuUuid releasedAt } } }`;
const DELETE = `mutation ($id: ID!) { deleteShard(id: $id) { id state } }`;
const SET_POLICY = `mutation ($teamId: ID!, $input: QuotaPolicyInput!) { setQuotaPolicy(teamId: $teamId, input: $input) { id } }`;
const CONTEXT = 512 * MiB; // registerRequest's context overhead, added to every GPU's reservation

for (const kind of TEST_DATABASE_KINDS) {
  describe(`a 2-GPU shard on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    let queue: QueueService;
    const commands = new FakeShardCommands();

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { shardCommands: commands },
      });
      fleet = h.controlPlane.app.get(AgentReportsService);
      queue = h.controlPlane.app.get(QueueService);
    });
    after(async () => {
      await h?.close();
    });

    /**
     * Each card's reservation, checked against the open reservations on it. One statement, so
     * one snapshot: the queue admits in the background after a freeing event, and a commit
     * between two reads would set a card's total against its reservations from before.
     */
    async function cards(uuids: readonly string[]): Promise<number[]> {
      const rows = await h.prisma.$queryRaw<{ uuid: string; total: bigint; open: bigint }[]>`
        SELECT gpu.uuid, gpu.reserved_bytes AS total,
               (SELECT coalesce(sum(shard_gpu.reserved_bytes), 0)::bigint FROM shard_gpu
                 WHERE shard_gpu.gpu_uuid = gpu.uuid AND shard_gpu.released_at IS NULL) AS open
          FROM gpu WHERE gpu.uuid = ANY(${uuids}::text[])`;
      const byUuid = new Map(rows.map((row) => [row.uuid, row]));
      return uuids.map((uuid) => {
        const row = byUuid.get(uuid);
        assert.ok(row, `card ${uuid} exists`);
        assert.equal(
          Number(row.total),
          Number(row.open),
          `card ${uuid}: reserved_bytes against its open reservations`,
        );
        return Number(row.total);
      });
    }

    /** The shard's open reservations: one on each card, or none. */
    async function held(shardId: string): Promise<string[]> {
      const open = await h.prisma.shardGpu.findMany({ where: { shardId, releasedAt: null } });
      assert.ok(open.length === 0 || open.length === 2, `${shardId} holds ${open.length} cards`);
      return open.map((r) => r.gpuUuid).sort();
    }

    async function state(team: TestTeam, id: string): Promise<string> {
      return assertOk(await h.graphql<{ shard: { state: string } }>(SHARD, { id }, team.member))
        .shard.state;
    }

    it('keeps both cards right through resize, reclaim, requeue and placement again', async () => {
      await fleet.registerHost(
        registerRequest('duo-1', {
          gpus: 2,
          gpuBytes: 80 * GiB,
          model: 'QGPU-D 80GB',
          labels: { pool: 'duo' },
        }),
      );
      const gpus = (await h.prisma.gpu.findMany({ where: { hostId: 'duo-1' } }))
        .map((g) => g.uuid)
        .sort();
      const lender = await createTestTeam(h, 'duo-lender', {
        maxTotal: '120g',
        maxShards: 10,
        maxPerShard: '120g',
      });
      const owner = await createTestTeam(h, 'duo-owner');
      assertOk(
        await h.graphql(SET_POLICY, {
          teamId: owner.id,
          input: {
            maxTotal: '100g',
            maxShards: 10,
            maxPerShard: '100g',
            guarantee: '80g',
            guaranteeGpuModel: 'QGPU-D',
          },
        }),
      );
      const pool = { queue: true, hostSelector: [{ key: 'pool', value: 'duo' }] };

      // Placed on both cards.
      const borrowed = assertOk(
        await createShard(h, lender.member, {
          ...pool,
          name: 'duo',
          gpuCount: 2,
          memoryPerGpu: '30g',
        }),
      ).createShard;
      await queue.admitNow();
      assert.equal(await state(lender, borrowed.id), 'PLACED');
      assert.deepEqual(await held(borrowed.id), gpus);
      assert.deepEqual(await cards(gpus), [30 * GiB + CONTEXT, 30 * GiB + CONTEXT]);
      await fleet.applyShardStateEvent(
        'duo-1',
        stateEvent('duo-1', borrowed.id, 'RUNNING', new Date()),
      );

      // Resized: both cards grow together, and the resize command names both.
      const grown = assertOk(
        await h.graphql<{ resizeShard: ShardResult }>(
          RESIZE,
          { id: borrowed.id, size: '50g' },
          lender.member,
        ),
      ).resizeShard;
      assert.deepEqual(grown.gpus.map((g) => g.gpuUuid).sort(), gpus);
      assert.deepEqual(await cards(gpus), [50 * GiB + CONTEXT, 50 * GiB + CONTEXT]);
      assert.deepEqual(commands.forShard(borrowed.id).at(-1), {
        type: 'resize',
        hostId: 'duo-1',
        shardId: borrowed.id,
        gpus: grown.gpus.map((g) => ({ uuid: g.gpuUuid, limitBytes: 50 * GiB + CONTEXT })),
      });

      // A 2-GPU shard within its team's guarantee needs 40 GiB on each card: the borrowed shard
      // is reclaimed, and holds both cards until the agent says it stopped.
      const mine = assertOk(
        await createShard(h, owner.member, {
          ...pool,
          name: 'mine',
          gpuCount: 2,
          memoryPerGpu: '40g',
        }),
      ).createShard;
      await queue.admitNow();
      assert.equal(await state(lender, borrowed.id), 'STOPPING');
      assert.equal(await state(owner, mine.id), 'PENDING');
      assert.deepEqual(await held(borrowed.id), gpus);
      assert.deepEqual(await cards(gpus), [50 * GiB + CONTEXT, 50 * GiB + CONTEXT]);

      // Stopped: both cards come back at once, and the owner's shard takes both.
      await fleet.applyShardStateEvent(
        'duo-1',
        stateEvent('duo-1', borrowed.id, 'STOPPED', new Date()),
      );
      assert.equal(await state(lender, borrowed.id), 'PENDING');
      assert.deepEqual(await held(borrowed.id), []);
      await cards(gpus); // the queue may already have placed the owner's shard: either way consistent
      await queue.admitNow();
      assert.equal(await state(owner, mine.id), 'PLACED');
      assert.equal(await state(lender, borrowed.id), 'PENDING', '50 GiB does not fit beside 40');
      assert.deepEqual(await held(mine.id), gpus);
      assert.deepEqual(await cards(gpus), [40 * GiB + CONTEXT, 40 * GiB + CONTEXT]);

      // The owner's shard goes: the reclaimed one is placed again on both cards, at its new size.
      assertOk(await h.graphql(DELETE, { id: mine.id }, owner.member));
      assert.deepEqual(await held(mine.id), []);
      await queue.admitNow();
      assert.equal(await state(lender, borrowed.id), 'PLACED');
      assert.deepEqual(await held(borrowed.id), gpus);
      assert.deepEqual(await cards(gpus), [50 * GiB + CONTEXT, 50 * GiB + CONTEXT]);
      const intervals = await h.prisma.shardGpu.findMany({ where: { shardId: borrowed.id } });
      assert.equal(intervals.length, 6, 'per card: placed, resized, placed again');
      for (const uuid of gpus) {
        assert.equal(intervals.filter((i) => i.gpuUuid === uuid).length, 3);
      }
    });
  });
}

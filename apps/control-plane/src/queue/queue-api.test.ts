import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  registerRequest,
  stateEvent,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { ShardEventBus } from '../events/shard-event-bus.js';
import { QUEUE_OPTIONS, type QueueOptions } from './queue-options.js';
import { QueueService } from './queue.service.js';

/** The pending queue through GraphQL, on PostgreSQL and on PGlite. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const SHARD = `query ($id: ID!) { shard(id: $id) { id state hostId failureReason queuePosition queueReason priorityClass startedAt } }`;
const DELETE = `mutation ($id: ID!) { deleteShard(id: $id) { id state } }`;
const SET_POLICY = `mutation ($teamId: ID!, $input: QuotaPolicyInput!) {
  setQuotaPolicy(teamId: $teamId, input: $input) { id quotaPolicy { guarantee { bytes } guaranteeGpuModel } }
}`;
const QUEUE = `query ($teamId: ID) { pendingQueue(teamId: $teamId) { position reasonKind reason waitingBehind shard { id name } } }`;
const SHARE = `query ($id: ID!) { team(id: $id) { share { guarantee { bytes } borrowed { bytes } held { bytes } pending } } }`;
const ESTIMATES = `query ($teamId: ID) { pendingQueue(teamId: $teamId) { reasonKind estimatedStart shard { id } } }`;

interface ShardView {
  id: string;
  state: string;
  hostId: string | null;
  failureReason: string | null;
  queuePosition: number | null;
  startedAt: string | null;
  queueReason: string | null;
  priorityClass: string;
}

/** One host of its own per test: 1 GPU of `gpuGiB`, model `model`, label pool=<pool>. */
async function registerPoolHost(
  fleet: AgentReportsService,
  pool: string,
  model = 'NVIDIA H100 80GB HBM3',
  gpuGiB = 80,
): Promise<void> {
  await fleet.registerHost(
    registerRequest(`${pool}-1`, { gpus: 1, gpuBytes: gpuGiB * GiB, model, labels: { pool } }),
  );
}

/** A shard of `team` that may wait in the queue, on the hosts labelled pool=<pool>. */
async function createInPool(
  h: ApiTestHarness,
  team: TestTeam,
  pool: string,
  input: Record<string, unknown>,
) {
  return assertOk(
    await createShard(h, team.member, {
      queue: true,
      hostSelector: [{ key: 'pool', value: pool }],
      ...input,
    }),
  ).createShard;
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`the queue on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    let queue: QueueService;
    const commands = new FakeShardCommands();

    const host = (pool: string, model?: string, gpuGiB?: number) =>
      registerPoolHost(fleet, pool, model, gpuGiB);
    const create = (team: TestTeam, pool: string, input: Record<string, unknown>) =>
      createInPool(h, team, pool, input);

    async function shard(team: TestTeam, id: string): Promise<ShardView> {
      return assertOk(await h.graphql<{ shard: ShardView }>(SHARD, { id }, team.member)).shard;
    }

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

    it('a request that fits nowhere now waits as PENDING with position and reason, and is placed when capacity frees', async () => {
      await host('wait');
      const team = await createTestTeam(h, 'waiters');
      const first = await create(team, 'wait', { name: 'big', memoryPerGpu: '60g' });
      await queue.admitNow();
      assert.equal((await shard(team, first.id)).state, 'PLACED');
      const second = await create(team, 'wait', { name: 'next', memoryPerGpu: '40g' });
      assert.equal(second.state, 'PENDING');
      assert.equal(second.hostId, null);
      await queue.admitNow();
      const waiting = await shard(team, second.id);
      assert.equal(waiting.state, 'PENDING');
      assert.equal(waiting.queuePosition, 1);
      assert.match(waiting.queueReason ?? '', /no host has room/);
      const listed = assertOk(
        await h.graphql<{ pendingQueue: { shard: { id: string }; position: number }[] }>(
          QUEUE,
          { teamId: team.id },
          team.member,
        ),
      ).pendingQueue;
      assert.deepEqual(
        listed.map((e) => e.shard.id),
        [second.id],
      );

      // queue: false keeps NO_CAPACITY; a request bigger than any GPU is refused at once.
      assertError(
        await createShard(h, team.member, {
          queue: false,
          memoryPerGpu: '40g',
          hostSelector: [{ key: 'pool', value: 'wait' }],
        }),
        'NO_CAPACITY',
      );
      assertError(
        await createShard(h, team.member, {
          queue: true,
          memoryPerGpu: '100g',
          hostSelector: [{ key: 'pool', value: 'wait' }],
        }),
        'NO_CAPACITY',
      );

      commands.recorded.length = 0;
      assertOk(await h.graphql(DELETE, { id: first.id }, team.member));
      await queue.admitNow();
      const placed = await shard(team, second.id);
      assert.equal(placed.state, 'PLACED');
      assert.equal(placed.hostId, 'wait-1');
      assert.equal(placed.queuePosition, null);
      assert.ok(
        commands.recorded.some((c) => c.type === 'launch' && c.spec.shardId === second.id),
        'the agent is told to launch the shard placed from the queue',
      );
    });

    it('deleteShard cancels a pending shard; maxWaitSeconds ends it as EXPIRED', async () => {
      await host('cancel');
      const team = await createTestTeam(h, 'cancellers');
      await create(team, 'cancel', { name: 'holder', memoryPerGpu: '70g' });
      await queue.admitNow();
      const cancelled = await create(team, 'cancel', { name: 'cancelled', memoryPerGpu: '40g' });
      const expiring = await create(team, 'cancel', {
        name: 'expiring',
        memoryPerGpu: '40g',
        maxWaitSeconds: 60,
      });
      assert.equal(
        assertOk(
          await h.graphql<{ deleteShard: { state: string } }>(
            DELETE,
            { id: cancelled.id },
            team.member,
          ),
        ).deleteShard.state,
        'DELETED',
      );
      await queue.admitNow(new Date(Date.now() + 61_000));
      const expired = await shard(team, expiring.id);
      assert.equal(expired.state, 'EXPIRED');
      assert.match(expired.failureReason ?? '', /maximum wait/);
      assert.equal((await shard(team, cancelled.id)).state, 'DELETED');
    });

    it('shardEvents carries the queue: PENDING, PLACED from the queue, EXPIRED', async () => {
      await host('events-q');
      const team = await createTestTeam(h, 'queue-events');
      const seen: string[] = [];
      const events = h.controlPlane.app.get(ShardEventBus).subscribe((event) => {
        if (event.shard.teamId === team.id) {
          seen.push(`${event.shard.name}: ${event.previousState ?? '-'} -> ${event.state}`);
        }
        return false;
      });
      try {
        const holder = await create(team, 'events-q', { name: 'holder', memoryPerGpu: '70g' });
        await queue.admitNow();
        await create(team, 'events-q', { name: 'next', memoryPerGpu: '40g' });
        await create(team, 'events-q', { name: 'late', memoryPerGpu: '40g', maxWaitSeconds: 60 });
        assertOk(await h.graphql(DELETE, { id: holder.id }, team.member));
        await queue.admitNow();
        await queue.admitNow(new Date(Date.now() + 61_000));
        assert.deepEqual(
          seen.filter((line) => !line.startsWith('holder')),
          [
            'next: - -> PENDING',
            'late: - -> PENDING',
            'next: PENDING -> PLACED',
            'late: PENDING -> EXPIRED',
          ],
        );
      } finally {
        await events.return?.();
      }
    });

    it('a higher priority class goes first; a non-preemptible class needs a guarantee', async () => {
      await host('prio');
      const team = await createTestTeam(h, 'prioritised');
      const holder = await create(team, 'prio', { name: 'holder', memoryPerGpu: '70g' });
      await queue.admitNow();
      const training = await create(team, 'prio', {
        name: 'training',
        memoryPerGpu: '40g',
        priorityClass: 'training',
      });
      const build = await create(team, 'prio', {
        name: 'build',
        memoryPerGpu: '40g',
        priorityClass: 'build',
      });
      assertOk(await h.graphql(DELETE, { id: holder.id }, team.member));
      await queue.admitNow();
      assert.equal((await shard(team, build.id)).state, 'PLACED');
      assert.equal((await shard(team, training.id)).state, 'PENDING');

      // inference is never preempted: without a guarantee it cannot run.
      assertError(
        await createShard(h, team.member, {
          queue: false,
          priorityClass: 'inference',
          memoryPerGpu: '1g',
          hostSelector: [{ key: 'pool', value: 'prio' }],
        }),
        'QUOTA_EXCEEDED',
      );
      assertError(
        await createShard(h, team.member, { priorityClass: 'urgent', memoryPerGpu: '1g' }),
        'BAD_USER_INPUT',
      );
    });

    it('a non-preemptible class counts only what its team holds on the models its guarantee covers', async () => {
      await host('model-m', 'QGPU-M 40GB', 40);
      await host('model-n', 'QGPU-N 40GB', 40);
      const team = await createTestTeam(h, 'per-model');
      assertOk(
        await h.graphql(SET_POLICY, {
          teamId: team.id,
          input: {
            maxTotal: '200g',
            maxShards: 10,
            maxPerShard: '100g',
            guarantee: '20g',
            guaranteeGpuModel: 'QGPU-M',
          },
        }),
      );
      // 30 GiB held on a model the guarantee does not cover does not count against it.
      const other = await create(team, 'model-n', { name: 'other-model', memoryPerGpu: '30g' });
      await queue.admitNow();
      assert.equal((await shard(team, other.id)).state, 'PLACED');
      const inference = assertOk(
        await createShard(h, team.member, { priorityClass: 'inference', memoryPerGpu: '10g' }),
      ).createShard;
      assert.equal(inference.state, 'PLACED');
      assert.equal(inference.hostId, 'model-m-1', 'only on the GPUs the guarantee covers');
      const refused = await createShard(h, team.member, {
        priorityClass: 'inference',
        memoryPerGpu: '15g',
      });
      assertError(refused, 'QUOTA_EXCEEDED');
      assert.match(
        refused.errors![0]!.message,
        /guarantee on "QGPU-M" GPUs: 10 GiB held there \+ 15 GiB requested > 20 GiB guaranteed/,
      );
      for (const id of [other.id, inference.id]) {
        assertOk(await h.graphql(DELETE, { id }, team.member));
      }
    });

    it('setQuotaPolicy refuses guarantees the fleet cannot keep, naming the numbers', async () => {
      await host('feasible', 'QGPU-F 40GB', 40);
      const a = await createTestTeam(h, 'guaranteed-a');
      const b = await createTestTeam(h, 'guaranteed-b');
      const policy = (guarantee: string) => ({
        maxTotal: '100g',
        maxShards: 10,
        maxPerShard: '100g',
        guarantee,
        guaranteeGpuModel: 'QGPU-F',
      });
      const ok = assertOk(
        await h.graphql<{ setQuotaPolicy: { quotaPolicy: { guarantee: { bytes: string } } } }>(
          SET_POLICY,
          { teamId: a.id, input: policy('30g') },
        ),
      );
      assert.equal(ok.setQuotaPolicy.quotaPolicy.guarantee.bytes, String(30 * GiB));
      const refused = await h.graphql(SET_POLICY, { teamId: b.id, input: policy('11g') });
      assertError(refused, 'QUOTA_EXCEEDED');
      assert.match(
        refused.errors![0]!.message,
        /guarantees on GPU model "qgpu-f" total 41 GiB \(guaranteed-a 30 GiB, guaranteed-b 11 GiB\) > 40 GiB/,
      );
      assertError(
        await h.graphql(SET_POLICY, { teamId: b.id, input: { ...policy('200g') } }),
        'BAD_USER_INPUT',
      );
      const policyOfB = await h.prisma.quotaPolicy.findUnique({ where: { teamId: b.id } });
      assert.equal(policyOfB?.guaranteeBytes ?? 0n, 0n, 'a refused policy writes nothing');
    });

    it('a team within its guarantee reclaims borrowed capacity: the victim stops, is requeued, and runs again after', async () => {
      await host('reclaim', 'QGPU-R 80GB', 80);
      const lender = await createTestTeam(h, 'lender');
      const owner = await createTestTeam(h, 'owner');
      assertOk(
        await h.graphql(SET_POLICY, {
          teamId: owner.id,
          input: {
            maxTotal: '80g',
            maxShards: 10,
            maxPerShard: '80g',
            guarantee: '40g',
            guaranteeGpuModel: 'QGPU-R',
          },
        }),
      );
      const borrowed = await create(lender, 'reclaim', { name: 'borrowed', memoryPerGpu: '70g' });
      await queue.admitNow();
      assert.equal((await shard(lender, borrowed.id)).state, 'PLACED');
      const firstRun = new Date(Date.now() - 60_000);
      await fleet.applyShardStateEvent(
        'reclaim-1',
        stateEvent('reclaim-1', borrowed.id, 'RUNNING', firstRun),
      );
      assert.equal((await shard(lender, borrowed.id)).startedAt, firstRun.toISOString());
      const share = assertOk(
        await h.graphql<{ team: { share: { borrowed: { bytes: string } } } }>(SHARE, {
          id: lender.id,
        }),
      );
      assert.equal(share.team.share.borrowed.bytes, String(70 * GiB));

      commands.recorded.length = 0;
      const mine = await create(owner, 'reclaim', { name: 'mine', memoryPerGpu: '40g' });
      await queue.admitNow();
      const victim = await shard(lender, borrowed.id);
      assert.equal(victim.state, 'STOPPING');
      assert.match(victim.failureReason ?? '', /reclaimed/);
      assert.ok(
        commands.recorded.some((c) => c.type === 'stop' && c.shardId === borrowed.id),
        'the agent is asked to stop the victim',
      );
      assert.match((await shard(owner, mine.id)).queueReason ?? '', /being stopped/);

      // The agent reports the victim stopped: it waits again, and the owner's shard runs.
      await fleet.applyShardStateEvent(
        'reclaim-1',
        stateEvent('reclaim-1', borrowed.id, 'STOPPED', new Date()),
      );
      const requeued = await shard(lender, borrowed.id);
      assert.equal(requeued.state, 'PENDING');
      assert.equal(requeued.startedAt, null, 'back in the queue, its run is over');
      await queue.admitNow();
      assert.equal((await shard(owner, mine.id)).state, 'PLACED');
      assert.equal((await shard(lender, borrowed.id)).state, 'PENDING');

      assertOk(await h.graphql(DELETE, { id: mine.id }, owner.member));
      await queue.admitNow();
      assert.equal((await shard(lender, borrowed.id)).state, 'PLACED');
      const secondRun = new Date();
      await fleet.applyShardStateEvent(
        'reclaim-1',
        stateEvent('reclaim-1', borrowed.id, 'RUNNING', secondRun),
      );
      assert.equal((await shard(lender, borrowed.id)).startedAt, secondRun.toISOString());
    });
  });

  // A control plane of its own: the placement rate is the process's, and this starts it cold.
  describe(`start estimates on ${kind}`, () => {
    let h: ApiTestHarness;
    let queue: QueueService;

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { shardCommands: new FakeShardCommands() },
      });
      queue = h.controlPlane.app.get(QueueService);
    });
    after(async () => {
      await h?.close();
    });

    const create = (team: TestTeam, pool: string, input: Record<string, unknown>) =>
      createInPool(h, team, pool, input);

    /** The team's waiting shards: reason and estimated start (ms; null: none) by shard id. */
    async function estimates(team: TestTeam) {
      const listed = assertOk(
        await h.graphql<{
          pendingQueue: {
            reasonKind: string;
            estimatedStart: string | null;
            shard: { id: string };
          }[];
        }>(ESTIMATES, { teamId: team.id }, team.member),
      ).pendingQueue;
      return new Map(
        listed.map((e) => [
          e.shard.id,
          {
            reasonKind: e.reasonKind,
            at: e.estimatedStart === null ? null : Date.parse(e.estimatedStart),
          },
        ]),
      );
    }

    it("a reclaim: its victims' grace end; waiting for capacity: null while the queue is cold, then by its placement rate", async () => {
      const fleet = h.controlPlane.app.get(AgentReportsService);
      await registerPoolHost(fleet, 'eta');
      await registerPoolHost(fleet, 'eta-reclaim', 'QGPU-E 80GB');
      // Cold: nothing was placed from the queue yet.
      const team = await createTestTeam(h, 'eta-waiters');
      let holder = await create(team, 'eta', { name: 'holder-0', memoryPerGpu: '40g' });
      await queue.admitNow();
      let next = await create(team, 'eta', { name: 'next-1', memoryPerGpu: '40g' });
      await queue.admitNow();
      assert.deepEqual((await estimates(team)).get(next.id), { reasonKind: 'capacity', at: null });

      // A reclaim: the owner's shard starts when its victim's grace ends.
      const lender = await createTestTeam(h, 'eta-lender');
      const owner = await createTestTeam(h, 'eta-owner');
      assertOk(
        await h.graphql(SET_POLICY, {
          teamId: owner.id,
          input: {
            maxTotal: '80g',
            maxShards: 10,
            maxPerShard: '80g',
            guarantee: '40g',
            guaranteeGpuModel: 'QGPU-E',
          },
        }),
      );
      const borrowed = await create(lender, 'eta-reclaim', { memoryPerGpu: '70g' });
      await queue.admitNow();
      const mine = await create(owner, 'eta-reclaim', { memoryPerGpu: '40g' });
      await queue.admitNow();
      const victim = await h.prisma.shard.findUniqueOrThrow({ where: { id: borrowed.id } });
      assert.equal(victim.state, 'STOPPING');
      const grace = h.controlPlane.app.get<QueueOptions>(QUEUE_OPTIONS).reclaimGraceSeconds;
      const reclaiming = (await estimates(owner)).get(mine.id);
      assert.equal(reclaiming?.reasonKind, 'reclaiming');
      assert.ok(reclaiming.at !== null, 'a reclaiming shard has an estimate');
      // updated_at is stamped when the victim went STOPPING, to the millisecond.
      const deadline = victim.updatedAt.getTime() + grace * 1000;
      assert.ok(Math.abs(reclaiming.at - deadline) <= 1, `${reclaiming.at} vs ${deadline}`);

      // Five placed from the queue, one after the other: each waited until the one before left.
      for (let i = 1; i <= 5; i++) {
        assertOk(await h.graphql(DELETE, { id: holder.id }, team.member));
        await queue.admitNow();
        assert.equal(
          (await h.prisma.shard.findUniqueOrThrow({ where: { id: next.id } })).state,
          'PLACED',
        );
        holder = next;
        next = await create(team, 'eta', { name: `next-${i + 1}`, memoryPerGpu: '40g' });
        await queue.admitNow();
      }
      const before = Date.now();
      const warm = (await estimates(team)).get(next.id);
      assert.equal(warm?.reasonKind, 'capacity');
      assert.ok(warm.at !== null, 'a capacity wait has an estimate once the queue has a rate');
      assert.ok(warm.at >= before, `${warm.at} is before ${before}`);
    });
  });
}

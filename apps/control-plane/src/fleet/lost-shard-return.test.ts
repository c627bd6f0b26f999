import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { QueueService } from '../queue/queue.service.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  heartbeat,
  MiB,
  registerRequest,
  stateEvent,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { AgentReportsService } from './agent-reports.service.js';
import { ManualClock } from './clock.js';
import { HostOfflineSweeper } from './host-offline-sweeper.js';

/**
 * A shard lost with its memory in host RAM, back with its host when the bounds moved while it
 * was away, or owed a resume (libs/limits lostShardReturn, fleet/lost-shard-returns.ts).
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const OFFLINE_SECONDS = 30;
const CONTEXT = 512 * MiB; // registerRequest's context overhead, in every cap
const SET_POLICY = `mutation ($teamId: ID!, $input: QuotaPolicyInput!) {
  setQuotaPolicy(teamId: $teamId, input: $input) { id } }`;
const OVERCOMMIT = `mutation ($hostId: ID!, $ratio: Float!) {
  setGpuOvercommit(hostId: $hostId, ratio: $ratio) }`;

for (const kind of TEST_DATABASE_KINDS) {
  describe(`a lost shard's return on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    let sweeper: HostOfflineSweeper;
    let queue: QueueService;
    let team: TestTeam;
    const commands = new FakeShardCommands();
    const clock = new ManualClock(new Date('2030-01-01T00:00:00Z'));

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { clock, shardCommands: commands, hostOfflineSeconds: OFFLINE_SECONDS },
      });
      fleet = h.controlPlane.app.get(AgentReportsService);
      sweeper = h.controlPlane.app.get(HostOfflineSweeper);
      // The tests sweep when they mean to (see host-offline-sweep.test.ts).
      await sweeper.onModuleDestroy();
      queue = h.controlPlane.app.get(QueueService);
      team = await createTestTeam(h, 'return-team', null);
      assertOk(
        await h.graphql(SET_POLICY, {
          teamId: team.id,
          input: { maxTotal: '1t', maxShards: 100, maxPerShard: '1t', allowElastic: true },
        }),
      );
    });
    after(async () => {
      await h?.close();
    });

    /** A time after every earlier one, for an agent's event (the clock moves on by 1 ms). */
    function tick(): Date {
      clock.advance(1);
      return clock.now();
    }

    /** Register of a one-GPU host labelled pool=<its id> whose agent suspends into `budget`. */
    function register(
      hostId: string,
      budget: number,
      options: Parameters<typeof registerRequest>[1] = {},
    ) {
      const request = registerRequest(hostId, { gpus: 1, labels: { pool: hostId }, ...options });
      return fleet.registerHost({
        ...request,
        host: { ...request.host, suspendBudgetBytes: budget },
      });
    }

    /** A RUNNING elastic shard of `memory` per GPU on `hostId`. */
    async function runningOn(hostId: string, name: string, memory: string, owner = team) {
      const created = assertOk(
        await createShard(h, owner.member, {
          name,
          memoryPerGpu: memory,
          elastic: true,
          hostSelector: [{ key: 'pool', value: hostId }],
        }),
      ).createShard;
      assert.equal(created.hostId, hostId);
      await fleet.applyShardStateEvent(hostId, stateEvent(hostId, created.id, 'RUNNING', tick()));
      return created.id;
    }

    async function suspend(id: string, owner = team) {
      assertOk(
        await h.graphql(
          `mutation ($id: ID!) { suspendShard(id: $id) { id } }`,
          { id },
          owner.member,
        ),
      );
    }

    async function suspended(hostId: string, id: string) {
      const outcome = await fleet.applyShardStateEvent(
        hostId,
        stateEvent(hostId, id, 'SUSPENDED', tick(), {
          moved: { bytes: 4 * GiB, seconds: 1, processes: 1 },
        }),
      );
      assert.deepEqual(outcome, { applied: true, state: 'SUSPENDED' });
    }

    /** Every other host heartbeats; then the sweep finds `hostId` silent: its shards LOST. */
    async function lose(hostId: string, ids: readonly string[]) {
      clock.advance((OFFLINE_SECONDS + 1) * 1000);
      const others = await h.prisma.host.findMany({
        where: { id: { not: hostId }, state: { not: 'OFFLINE' } },
      });
      for (const { id } of others) await fleet.recordHeartbeat(id, heartbeat(id, clock.now()));
      await sweeper.sweep();
      assert.equal(
        (await h.prisma.host.findUniqueOrThrow({ where: { id: hostId } })).state,
        'OFFLINE',
      );
      for (const id of ids) {
        assert.equal((await h.prisma.shard.findUniqueOrThrow({ where: { id } })).state, 'LOST');
      }
    }

    const running = (shardId: string, memory: 'resident' | 'suspended' | 'partial') => ({
      shardId,
      containerId: `c-${shardId}`,
      state: 'RUNNING' as const,
      memory,
    });

    /** The GPU's caps against its bounds, and the host's caps in host RAM against its budget. */
    async function bounds(hostId: string) {
      const gpu = await h.prisma.gpu.findFirstOrThrow({ where: { hostId } });
      const host = await h.prisma.host.findUniqueOrThrow({ where: { id: hostId } });
      const inHostRam = await h.prisma.shard.findMany({
        where: { hostId, state: { in: ['SUSPENDING', 'SUSPENDED', 'RESUMING'] } },
      });
      return {
        caps: Number(gpu.reservedBytes + gpu.suspendedBytes),
        promise: Math.floor(Number(gpu.totalBytes) * gpu.overcommitRatio),
        reserved: Number(gpu.reservedBytes),
        suspended: Number(gpu.suspendedBytes),
        budget: Number(host.suspendBudgetBytes),
        inHostRam: inHostRam.reduce((sum, s) => sum + Number(s.limitBytesPerGpu) * s.gpuCount, 0),
      };
    }

    it("a ratio lowered while its host was away: a return in host RAM that would pass the GPU's promise is FAILED, the promise kept", async () => {
      const hostId = 'ratio-0';
      await register(hostId, 200 * GiB);
      // Oversubscribed 2×: two 50 GiB shards suspended from one 80 GiB card.
      assertOk(await h.graphql(OVERCOMMIT, { hostId, ratio: 2 }));
      const first = await runningOn(hostId, 'first', '50g');
      await suspend(first);
      await suspended(hostId, first);
      const second = await runningOn(hostId, 'second', '50g');
      await suspend(second);
      await suspended(hostId, second);
      const before = await bounds(hostId);
      assert.deepEqual([before.suspended, before.promise], [2 * (50 * GiB + CONTEXT), 160 * GiB]);
      await lose(hostId, [first, second]);
      // Nothing on the GPU counts while its host is away, so an admin may take the
      // oversubscription back: its caps may add up to 80 GiB again, one shard's worth.
      assertOk(await h.graphql(OVERCOMMIT, { hostId, ratio: 1 }));

      const reply = await register(hostId, 200 * GiB, {
        runningShards: [running(first, 'suspended'), running(second, 'suspended')],
      });

      const shards = await h.prisma.shard.findMany({ where: { id: { in: [first, second] } } });
      assert.deepEqual(shards.map((s) => s.state).sort(), ['FAILED', 'SUSPENDED']);
      const failed = shards.find((s) => s.state === 'FAILED')!;
      assert.match(
        failed.failureReason ?? '',
        /was in host RAM when its host came back, and neither stays there nor fits back on its GPUs: GPU \S+ promises 80 GiB in all \(memory × overcommit ratio\) and 50\.5 GiB of it is taken/,
      );
      const after = await bounds(hostId);
      assert.ok(after.caps <= after.promise, JSON.stringify(after));
      assert.deepEqual([after.reserved, after.suspended], [0, 50 * GiB + CONTEXT]);
      assert.equal(
        await h.prisma.shardSuspension.count({
          where: { shardId: { in: [first, second] }, resumedAt: null },
        }),
        1,
      );
      assert.ok(reply.accepted);
      assert.deepEqual(reply.suspendedShardIds ?? [], [
        shards.find((s) => s.state === 'SUSPENDED')!.id,
      ]);
      assert.ok(reply.stoppedShardIds.includes(failed.id), 'its container is stopped');
    });

    it('a budget lowered while its host was away: back on its GPU (RESUMING) when the GPU has room, FAILED when it has none; the budget kept', async () => {
      const hostId = 'budget-0';
      await register(hostId, 100 * GiB);
      const id = await runningOn(hostId, 'asleep', '10g');
      await suspend(id);
      await suspended(hostId, id);
      const cap = 10 * GiB + CONTEXT;
      await lose(hostId, [id]);

      // Its agent restarted with GPUSHARDS_SUSPEND_BUDGET=5g: its 10.5 GiB cannot stay in host
      // RAM, and its GPU has room for it.
      commands.recorded.length = 0;
      const reply = await register(hostId, 5 * GiB, {
        runningShards: [running(id, 'partial')],
      });
      const shard = await h.prisma.shard.findUniqueOrThrow({ where: { id } });
      assert.equal(shard.state, 'RESUMING');
      const back = await bounds(hostId);
      assert.deepEqual([back.reserved, back.suspended], [cap, 0]);
      assert.ok(reply.accepted);
      assert.deepEqual(
        reply.desired.map((spec) => spec.shardId),
        [id],
        'the agent moves its memory back',
      );
      assert.deepEqual(reply.suspendedShardIds ?? [], []);
      assert.deepEqual(
        commands.forShard(id).map((command) => command.type),
        ['resume'],
      );
      assert.equal(
        await h.prisma.shardSuspension.count({ where: { shardId: id, resumedAt: null } }),
        0,
      );
      await fleet.applyShardStateEvent(
        hostId,
        stateEvent(hostId, id, 'RESUMED', tick(), {
          moved: { bytes: 4 * GiB, seconds: 1, processes: 1 },
        }),
      );
      assert.equal((await h.prisma.shard.findUniqueOrThrow({ where: { id } })).state, 'RUNNING');

      // Again, and now its agent registers a card of 8 GiB too: nowhere to go.
      await register(hostId, 100 * GiB, { runningShards: [running(id, 'resident')] });
      await suspend(id);
      await suspended(hostId, id);
      await lose(hostId, [id]);
      await register(hostId, 5 * GiB, {
        gpuBytes: 8 * GiB,
        runningShards: [running(id, 'suspended')],
      });
      const failed = await h.prisma.shard.findUniqueOrThrow({ where: { id } });
      assert.equal(failed.state, 'FAILED');
      assert.match(
        failed.failureReason ?? '',
        /its host's budget for suspended shards \(GPUSHARDS_SUSPEND_BUDGET\) is 5 GiB and 0 B of it is taken/,
      );
      const after = await bounds(hostId);
      assert.ok(after.inHostRam <= after.budget, JSON.stringify(after));
      assert.ok(after.caps <= after.promise, JSON.stringify(after));
    });

    it('a reclaim victim lost mid-suspend comes back SUSPENDING and, its suspend done, wants its resume; a resume wanted before the loss stays wanted; the queue resumes both', async () => {
      const hostId = 'owed-0';
      await register(hostId, 100 * GiB);
      const victim = await runningOn(hostId, 'victim', '10g');
      const woken = await runningOn(hostId, 'woken', '10g');
      // A reclaim's suspend as the queue writes it (ElasticMoves.suspend with cause 'reclaim':
      // the cause recorded, no resume wanted yet, since a reclaimed shard's is wanted once it is
      // SUSPENDED); the owner's suspend is the same move with another cause.
      await suspend(victim);
      await h.prisma.shard.update({ where: { id: victim }, data: { suspendCause: 'reclaim' } });
      // The other one asked back (its owner, or a wake) while its suspend was under way.
      await suspend(woken);
      assertOk(
        await h.graphql(
          `mutation ($id: ID!) { resumeShard(id: $id) { id } }`,
          { id: woken },
          team.member,
        ),
      );
      const wantedAt = (await h.prisma.shard.findUniqueOrThrow({ where: { id: woken } }))
        .resumeWantedAt;
      assert.ok(wantedAt !== null);
      await lose(hostId, [victim, woken]);

      // Back by a heartbeat, both suspends half done.
      await fleet.recordHeartbeat(
        hostId,
        heartbeat(hostId, clock.now(), [
          { shardId: victim, usedBytesPerGpu: [], memory: 'partial' },
          { shardId: woken, usedBytesPerGpu: [], memory: 'partial' },
        ]),
      );
      // Half moved: SUSPENDING until the agent finishes (LOST -> SUSPENDING keeps a wanted
      // resume, which a suspend begun afresh would drop).
      const [v, w] = await Promise.all(
        [victim, woken].map((id) => h.prisma.shard.findUniqueOrThrow({ where: { id } })),
      );
      assert.deepEqual([v!.state, w!.state], ['SUSPENDING', 'SUSPENDING']);
      assert.equal(w!.resumeWantedAt?.getTime(), wantedAt.getTime(), 'kept as it was wanted');
      for (const id of [victim, woken]) await suspended(hostId, id);
      const victimNow = await h.prisma.shard.findUniqueOrThrow({ where: { id: victim } });
      // SUSPENDED, or already RESUMING: a suspend's end runs a queue pass of its own.
      assert.ok(['SUSPENDED', 'RESUMING'].includes(victimNow.state), victimNow.state);
      assert.ok(victimNow.resumeWantedAt !== null, 'the reclaim victim is owed its resume');

      await queue.admitNow();
      const resumed = await h.prisma.shard.findMany({ where: { id: { in: [victim, woken] } } });
      assert.deepEqual(
        resumed.map((s) => s.state),
        ['RESUMING', 'RESUMING'],
      );
    });

    it('half moved: back SUSPENDING with its reservation taken again, so that no shard is placed in what is still on its GPU; its SUSPENDED event releases it', async () => {
      const hostId = 'half-0';
      await register(hostId, 100 * GiB);
      // Oversubscribed 2x: only the resident bound keeps a neighbour off the GPU.
      assertOk(await h.graphql(OVERCOMMIT, { hostId, ratio: 2 }));
      const id = await runningOn(hostId, 'half', '40g');
      await suspend(id);
      await lose(hostId, [id]);
      const cap = 40 * GiB + CONTEXT;

      commands.recorded.length = 0;
      const reply = await register(hostId, 100 * GiB, { runningShards: [running(id, 'partial')] });
      const shard = await h.prisma.shard.findUniqueOrThrow({ where: { id } });
      assert.equal(shard.state, 'SUSPENDING');
      const back = await bounds(hostId);
      assert.deepEqual([back.reserved, back.suspended, back.inHostRam], [cap, 0, cap]);
      assert.ok(reply.accepted);
      assert.deepEqual(reply.suspendedShardIds, [id], 'the agent keeps it suspended');
      assert.deepEqual(
        commands.forShard(id).map((command) => command.type),
        ['suspend'],
        'and finishes the suspend',
      );
      // 45 GiB more would pass the card's 80 GiB with what the half-moved shard still has there.
      assertError(
        await createShard(h, team.member, {
          name: 'neighbour',
          memoryPerGpu: '45g',
          hostSelector: [{ key: 'pool', value: hostId }],
        }),
        'NO_CAPACITY',
      );

      await suspended(hostId, id);
      const done = await bounds(hostId);
      assert.deepEqual([done.reserved, done.suspended], [0, cap]);
      assert.equal(
        await h.prisma.shardSuspension.count({ where: { shardId: id, resumedAt: null } }),
        1,
      );
      const neighbour = assertOk(
        await createShard(h, team.member, {
          name: 'neighbour',
          memoryPerGpu: '45g',
          hostSelector: [{ key: 'pool', value: hostId }],
        }),
      ).createShard;
      assert.equal(neighbour.hostId, hostId, 'placed once the memory has left the GPU');
    });

    it('half moved onto a GPU with no room left for it: FAILED, its container stopped, every bound kept (not SUSPENDED with part of it unreserved)', async () => {
      const hostId = 'half-1';
      await register(hostId, 100 * GiB);
      assertOk(await h.graphql(OVERCOMMIT, { hostId, ratio: 2 }));
      const id = await runningOn(hostId, 'half', '10g');
      await suspend(id);
      await lose(hostId, [id]);

      // Its agent comes back with an 8 GiB card: its 10.5 GiB cap would fit the promise (16 GiB)
      // suspended, but not the card.
      const reply = await register(hostId, 100 * GiB, {
        gpuBytes: 8 * GiB,
        runningShards: [running(id, 'partial')],
      });
      const shard = await h.prisma.shard.findUniqueOrThrow({ where: { id } });
      assert.equal(shard.state, 'FAILED');
      assert.match(
        shard.failureReason ?? '',
        /was half moved to host RAM when its host came back, and its GPUs no longer have room/,
      );
      assert.ok(reply.accepted);
      assert.ok(reply.stoppedShardIds.includes(id), 'its container is stopped');
      const after = await bounds(hostId);
      assert.deepEqual([after.reserved, after.suspended, after.inHostRam], [0, 0, 0]);
    });

    it("a budget lowered by an agent's restart, its host never lost: SUSPENDED shards resumed where their GPUs have room, the rest kept and suspends refused until it fits", async () => {
      const hostId = 'lowered-0';
      await register(hostId, 100 * GiB);
      assertOk(await h.graphql(OVERCOMMIT, { hostId, ratio: 2 }));
      const big = await runningOn(hostId, 'big', '30g');
      await suspend(big);
      await suspended(hostId, big);
      const small = await runningOn(hostId, 'small', '10g');
      await suspend(small);
      await suspended(hostId, small);
      const hog = await runningOn(hostId, 'hog', '45g');
      const tiny = await runningOn(hostId, 'tiny', '2g');
      // Resident: 45.5 + 2.5 GiB of 80: room for big (30.5) to come back, not for both.
      const before = await bounds(hostId);
      assert.deepEqual([before.reserved, before.inHostRam], [48 * GiB, 41 * GiB]);

      commands.recorded.length = 0;
      const reply = await register(hostId, 5 * GiB, {
        runningShards: [
          running(big, 'suspended'),
          running(small, 'suspended'),
          running(hog, 'resident'),
          running(tiny, 'resident'),
        ],
      });
      assert.ok(reply.accepted);
      const states = async () =>
        Object.fromEntries(
          (await h.prisma.shard.findMany({ where: { hostId } })).map((s) => [s.name, s.state]),
        );
      assert.deepEqual(await states(), {
        big: 'RESUMING',
        small: 'SUSPENDED',
        hog: 'RUNNING',
        tiny: 'RUNNING',
      });
      assert.deepEqual(
        commands.forShard(big).map((command) => command.type),
        ['resume'],
      );
      const after = await bounds(hostId);
      assert.deepEqual([after.reserved, after.suspended], [78.5 * GiB, 10 * GiB + CONTEXT]);
      assert.ok(after.reserved <= 80 * GiB);

      // Still 10.5 GiB in host RAM against a 5 GiB budget: no suspend is taken on.
      const refused = await h.graphql(
        `mutation ($id: ID!) { suspendShard(id: $id) { id } }`,
        { id: tiny },
        team.member,
      );
      assertError(refused, 'NOT_SUSPENDABLE');
      assert.match(JSON.stringify(refused.errors), /budget/);
      await fleet.applyShardStateEvent(
        hostId,
        stateEvent(hostId, big, 'RESUMED', tick(), {
          moved: { bytes: 4 * GiB, seconds: 1, processes: 1 },
        }),
      );
      assert.equal((await states()).big, 'RUNNING');
    });

    it("no state event alone brings a LOST shard back (it would take room unchecked): the host's return does", async () => {
      const hostId = 'event-0';
      await register(hostId, 100 * GiB);
      const id = await runningOn(hostId, 'asleep', '10g');
      await suspend(id);
      await suspended(hostId, id);
      await lose(hostId, [id]);

      for (const state of ['SUSPENDED', 'RESUMED', 'RUNNING'] as const) {
        assert.deepEqual(
          await fleet.applyShardStateEvent(hostId, stateEvent(hostId, id, state, tick())),
          { applied: false, reason: 'not-applicable' },
          state,
        );
      }
      assert.equal((await h.prisma.shard.findUniqueOrThrow({ where: { id } })).state, 'LOST');

      await fleet.recordHeartbeat(
        hostId,
        heartbeat(hostId, clock.now(), [{ shardId: id, usedBytesPerGpu: [], memory: 'suspended' }]),
      );
      assert.equal((await h.prisma.shard.findUniqueOrThrow({ where: { id } })).state, 'SUSPENDED');
      const back = await bounds(hostId);
      assert.deepEqual([back.reserved, back.suspended], [0, 10 * GiB + CONTEXT]);
    });
  });
}

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PROTOCOL_VERSION } from '@gpushards/protocol';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { QueueService } from '../queue/queue.service.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  MiB,
  registerRequest,
  reservedOn,
  stateEvent,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { IdleSweeper } from '../compute/idle-sweeper.js';
import { SUSPEND_RETRY_SECONDS } from './suspend-retry.js';
import { ElasticService } from './elastic.service.js';

/**
 * Elastic memory through the API, the agent's reports and the queue (docs/elastic.md), on
 * PostgreSQL and PGlite: a user's suspend and resume, a wake, the room a suspended cap keeps,
 * oversubscription, make-room, stop, the reconcile that settles a lost event, and usage.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const CONTEXT = 512 * MiB; // registerRequest's context overhead, in every cap
const SHARD = `query ($id: ID!) { shard(id: $id) { id state elastic
  memory { where suspendCause resumeWantedAt moved { bytes } total { bytes } lastMoveSeconds lastError } } }`;
const SUSPEND = `mutation ($id: ID!) { suspendShard(id: $id) { id state } }`;
const RESUME = `mutation ($id: ID!) { resumeShard(id: $id) { id state memory { resumeWantedAt } } }`;
const STOP = `mutation ($id: ID!) { stopShard(id: $id) { id state } }`;
const RESIZE = `mutation ($id: ID!) { resizeShard(id: $id, memoryPerGpu: "10g") { id } }`;
const OVERCOMMIT = `mutation ($hostId: ID!, $ratio: Float!) { setGpuOvercommit(hostId: $hostId, ratio: $ratio) }`;
const ALLOW = `mutation ($teamId: ID!, $input: QuotaPolicyInput!) { setQuotaPolicy(teamId: $teamId, input: $input) { id } }`;
const USAGE = `query ($teamId: ID!, $from: String!, $to: String!) {
  usage(teamId: $teamId, from: $from, to: $to) { suspendedGibHours
    shards(first: 10) { edges { node { shardId suspendedGibHours } } } } }`;

interface MemoryView {
  where: string;
  suspendCause: string | null;
  resumeWantedAt: string | null;
  moved: { bytes: string } | null;
  total: { bytes: string } | null;
  lastMoveSeconds: number | null;
  lastError: string | null;
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`elastic memory on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    let queue: QueueService;
    let elastic: ElasticService;
    let team: TestTeam;
    const commands = new FakeShardCommands();
    let clock = Date.now();
    const tick = () => new Date((clock = Math.max(Date.now(), clock + 1)));

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { shardCommands: commands },
      });
      fleet = h.controlPlane.app.get(AgentReportsService);
      queue = h.controlPlane.app.get(QueueService);
      elastic = h.controlPlane.app.get(ElasticService);
      team = await createTestTeam(h, 'notebooks');
    });
    after(async () => {
      await h?.close();
    });

    async function shard(id: string): Promise<{ state: string; memory: MemoryView }> {
      return assertOk(
        await h.graphql<{ shard: { state: string; memory: MemoryView } }>(
          SHARD,
          { id },
          team.member,
        ),
      ).shard;
    }

    async function running(hostId: string, name: string, memoryPerGpu: string, extra = {}) {
      const created = assertOk(
        await createShard(h, team.member, {
          name,
          memoryPerGpu,
          queue: true,
          hostSelector: [{ key: 'pool', value: hostId }],
          ...extra,
        }),
      ).createShard;
      await fleet.applyShardStateEvent(hostId, stateEvent(hostId, created.id, 'RUNNING', tick()));
      return created.id;
    }

    async function suspended(hostId: string, id: string, bytes: number): Promise<void> {
      await fleet.applyShardStateEvent(
        hostId,
        stateEvent(hostId, id, 'SUSPENDED', tick(), {
          moved: { bytes, seconds: 1.5, processes: 2 },
        }),
      );
    }

    /** A one-GPU host whose agent suspends (a host-RAM budget of 100 GiB). */
    async function registerSuspending(hostId: string, gpuBytes: number): Promise<void> {
      const request = registerRequest(hostId, { gpus: 1, gpuBytes, labels: { pool: hostId } });
      await fleet.registerHost({
        ...request,
        host: { ...request.host, suspendBudgetBytes: 100 * GiB },
      });
    }

    async function gpuRow(hostId: string) {
      return h.prisma.gpu.findFirstOrThrow({ where: { hostId } });
    }

    it('lets only teams whose quota allows it create elastic shards', async () => {
      await fleet.registerHost(
        registerRequest('plain-1', { gpus: 1, labels: { pool: 'plain-1' } }),
      );
      const refused = await createShard(h, team.member, { name: 'nb-0', elastic: true });
      assertError(refused, 'QUOTA_EXCEEDED');
      assert.match(refused.errors![0]!.message, /allowElastic/);
      assertOk(
        await h.graphql(ALLOW, {
          teamId: team.id,
          input: { maxTotal: '10t', maxShards: 1000, maxPerShard: '1t', allowElastic: true },
        }),
      );
      const id = await running('plain-1', 'nb-1', '8g', { elastic: true });
      const view = assertOk(
        await h.graphql<{ shard: { elastic: boolean } }>(SHARD, { id }, team.member),
      );
      assert.equal(view.shard.elastic, true);
      // plain-1's agent registered no budget: its shards cannot be suspended, and the error says why.
      const notSuspendable = await h.graphql(SUSPEND, { id }, team.member);
      assertError(notSuspendable, 'NOT_SUSPENDABLE');
      assert.match(notSuspendable.errors![0]!.message, /does not suspend/);
      assert.equal((await shard(id)).state, 'RUNNING');
    });

    it('suspends on request, gives the GPU back, keeps the cap promised and resumes on a wake', async () => {
      const host = 'elastic-1';
      await registerSuspending(host, 80 * GiB);
      const cap = 40 * GiB + CONTEXT;
      const id = await running(host, 'nb-2', '40g', { elastic: true });
      const uuid = (await gpuRow(host)).uuid;
      assert.equal(await reservedOn(h, uuid), cap);

      assert.equal(
        assertOk(await h.graphql<{ suspendShard: { state: string } }>(SUSPEND, { id }, team.member))
          .suspendShard.state,
        'SUSPENDING',
      );
      const sent = commands.forShard(id).at(-1)!;
      const versionOf = async () =>
        (await h.prisma.shard.findUniqueOrThrow({ where: { id } })).version;
      // The move carries the version it was decided at: the agent refuses an older one.
      assert.deepEqual(sent, {
        type: 'suspend',
        hostId: host,
        shardId: id,
        cause: 'suspend-requested',
        shardVersion: await versionOf(),
      });
      // A second ask is answered as it stands; nothing else is sent.
      assertOk(await h.graphql(SUSPEND, { id }, team.member));
      assert.equal(commands.forShard(id).filter((c) => c.type === 'suspend').length, 1);
      // Progress while the agent moves it.
      await fleet.applyShardStateEvent(
        host,
        stateEvent(host, id, 'SUSPENDING', tick(), {
          progress: { completedBytes: 10 * GiB, totalBytes: 30 * GiB },
        }),
      );
      const moving = await shard(id);
      assert.equal(moving.memory.where, 'MOVING_OUT');
      assert.equal(moving.memory.moved?.bytes, String(10 * GiB));
      assert.equal(moving.memory.total?.bytes, String(30 * GiB));

      await suspended(host, id, 30 * GiB);
      const after = await shard(id);
      assert.equal(after.state, 'SUSPENDED');
      assert.equal(after.memory.where, 'HOST');
      assert.equal(after.memory.suspendCause, 'suspend-requested');
      assert.equal(after.memory.lastMoveSeconds, 1.5);
      // The GPU is given back, and its cap stays promised there.
      const gpu = await gpuRow(host);
      assert.equal(Number(gpu.reservedBytes), 0);
      assert.equal(Number(gpu.suspendedBytes), cap);
      assertError(await h.graphql(RESIZE, { id }, team.member), 'CONFLICT');

      // Without oversubscription the promised cap keeps a second 40g shard out...
      const refused = await createShard(h, team.member, {
        name: 'big',
        memoryPerGpu: '40g',
        hostSelector: [{ key: 'pool', value: host }],
      });
      assertError(refused, 'NO_CAPACITY');
      assert.match(refused.errors![0]!.message, /free: #0 39\.5 GiB/);
      // ...until an admin lets this GPU's caps pass its memory through elastic shards.
      assert.equal(
        assertOk(
          await h.graphql<{ setGpuOvercommit: number }>(OVERCOMMIT, { hostId: host, ratio: 2 }),
        ).setGpuOvercommit,
        1,
      );
      assertError(await h.graphql(OVERCOMMIT, { hostId: host, ratio: 0.5 }), 'BAD_USER_INPUT');
      const blocked = assertOk(
        await createShard(h, team.member, {
          name: 'big',
          memoryPerGpu: '40g',
          hostSelector: [{ key: 'pool', value: host }],
        }),
      ).createShard;
      assert.equal((await shard(blocked.id)).state, 'PLACED');
      assert.equal(await reservedOn(h, uuid), cap);

      // A process of the suspended shard asks for the GPU: its resume is wanted, and it waits
      // for room on its own GPU (the neighbour holds it) rather than racing it.
      const wokeAt = new Date(clock + 500);
      assert.equal(
        await elastic.wake(host, {
          protocolVersion: PROTOCOL_VERSION,
          hostId: host,
          shardId: id,
          at: wokeAt.toISOString(),
          requests: 3,
        }),
        true,
      );
      await queue.admitNow();
      const waiting = await shard(id);
      assert.equal(waiting.state, 'SUSPENDED');
      assert.equal(waiting.memory.resumeWantedAt, wokeAt.toISOString());
      assert.ok(queue.queue().some((entry) => entry.shardId === id));

      // Room comes back: the queue resumes it on its GPU and tells its agent.
      assertOk(await h.graphql(STOP, { id: blocked.id }, team.member));
      await fleet.applyShardStateEvent(host, stateEvent(host, blocked.id, 'STOPPED', tick()));
      await queue.admitNow();
      assert.equal((await shard(id)).state, 'RESUMING');
      const resume = commands.forShard(id).at(-1)!;
      assert.deepEqual(resume, {
        type: 'resume',
        hostId: host,
        shardId: id,
        shardVersion: await versionOf(),
      });
      assert.ok(
        resume.shardVersion > (sent.type === 'suspend' ? sent.shardVersion : Infinity),
        'the resume is newer than the suspend',
      );
      const gpuBack = await gpuRow(host);
      assert.equal(Number(gpuBack.reservedBytes), cap);
      assert.equal(Number(gpuBack.suspendedBytes), 0);
      await fleet.applyShardStateEvent(
        host,
        stateEvent(host, id, 'RESUMED', tick(), {
          moved: { bytes: 30 * GiB, seconds: 0.8, processes: 2 },
        }),
      );
      const back = await shard(id);
      assert.equal(back.state, 'RUNNING');
      assert.equal(back.memory.where, 'GPU');
      assert.equal(back.memory.suspendCause, null);

      // Its time in host RAM is reported apart from its GPU time.
      const usage = assertOk(
        await h.graphql<{
          usage: {
            suspendedGibHours: number;
            shards: { edges: { node: { shardId: string; suspendedGibHours: number } }[] };
          };
        }>(USAGE, {
          teamId: team.id,
          from: new Date(Date.now() - 3_600_000).toISOString(),
          to: new Date(Date.now() + 3_600_000).toISOString(),
        }),
      );
      assert.ok(usage.usage.suspendedGibHours > 0);
      assert.ok(
        usage.usage.shards.edges.find((e) => e.node.shardId === id)!.node.suspendedGibHours > 0,
      );
    });

    it('stops a suspended shard at once, and settles a suspend whose event was lost', async () => {
      const host = 'elastic-2';
      await registerSuspending(host, 80 * GiB);
      const a = await running(host, 'nb-3', '8g', { elastic: true });
      assertOk(await h.graphql(SUSPEND, { id: a }, team.member));
      await suspended(host, a, 4 * GiB);
      assert.equal(
        assertOk(await h.graphql<{ stopShard: { state: string } }>(STOP, { id: a }, team.member))
          .stopShard.state,
        'STOPPED',
      );
      assert.equal(commands.forShard(a).at(-1)!.type, 'stop');
      assert.equal(Number((await gpuRow(host)).suspendedBytes), 0);
      const stay = await h.prisma.shardSuspension.findFirstOrThrow({ where: { shardId: a } });
      assert.notEqual(stay.resumedAt, null);

      // The SUSPENDED event never came: the reconcile sees its memory in host RAM.
      const b = await running(host, 'nb-4', '8g', { elastic: true });
      assertOk(await h.graphql(SUSPEND, { id: b }, team.member));
      const reply = await fleet.reconcile(host, {
        protocolVersion: PROTOCOL_VERSION,
        hostId: host,
        observedAt: tick().toISOString(),
        containers: [
          {
            shardId: b,
            containerId: 'c-b',
            running: true,
            status: 'running',
            memory: 'suspended',
          },
        ],
      });
      assert.equal((await shard(b)).state, 'SUSPENDED');
      assert.deepEqual(reply.suspendedShardIds, [b]);
      assert.ok(!reply.desired.some((spec) => spec.shardId === b));
      // Its owner asks for it back: the queue resumes it on its GPU at the next pass.
      const asked = assertOk(
        await h.graphql<{ resumeShard: { memory: { resumeWantedAt: string | null } } }>(
          RESUME,
          { id: b },
          team.member,
        ),
      );
      assert.notEqual(asked.resumeShard.memory.resumeWantedAt, null);
      await queue.admitNow();
      assert.equal((await shard(b)).state, 'RESUMING');
      assertError(await h.graphql(RESUME, { id: a }, team.member), 'CONFLICT');
    });

    it('suspends and resumes a 2-GPU shard on both of its GPUs together', async () => {
      const host = 'elastic-duo';
      const request = registerRequest(host, {
        gpus: 2,
        gpuBytes: 80 * GiB,
        labels: { pool: host },
      });
      await fleet.registerHost({
        ...request,
        host: { ...request.host, suspendBudgetBytes: 100 * GiB },
      });
      const cap = 16 * GiB + CONTEXT;
      const id = await running(host, 'duo', '16g', { elastic: true, gpuCount: 2 });
      const gpus = () =>
        h.prisma.gpu.findMany({ where: { hostId: host }, orderBy: { uuid: 'asc' } });
      assertOk(await h.graphql(SUSPEND, { id }, team.member));
      await suspended(host, id, 20 * GiB);
      assert.deepEqual(
        (await gpus()).map((g) => [Number(g.reservedBytes), Number(g.suspendedBytes)]),
        [
          [0, cap],
          [0, cap],
        ],
      );
      assertOk(await h.graphql(RESUME, { id }, team.member));
      await queue.admitNow();
      assert.equal((await shard(id)).state, 'RESUMING');
      assert.deepEqual(
        (await gpus()).map((g) => [Number(g.reservedBytes), Number(g.suspendedBytes)]),
        [
          [cap, 0],
          [cap, 0],
        ],
      );
      const open = await h.prisma.shardGpu.findMany({ where: { shardId: id, releasedAt: null } });
      assert.deepEqual(
        open.map((r) => r.gpuUuid).sort(),
        (await gpus()).map((g) => g.uuid),
      );
    });

    it("the team's idle policy suspends an idle elastic shard after its report (IDLE_SUSPEND)", async () => {
      const host = 'elastic-idle';
      await registerSuspending(host, 80 * GiB);
      const id = await running(host, 'nb-idle-policy', '4g', { elastic: true });
      const t0 = Date.now() - 3_600_000;
      await h.prisma.shard.update({ where: { id }, data: { startedAt: new Date(t0) } });
      await h.prisma.shardGpu.updateMany({
        where: { shardId: id, releasedAt: null },
        data: { busyRatio: 0, lastKernelAt: new Date(t0) },
      });
      assertOk(
        await h.graphql(
          `mutation ($teamId: ID!) { setTeamIdlePolicy(teamId: $teamId, idleAfterSeconds: 60,
             suspendAfterSeconds: 120) { id } }`,
          { teamId: team.id },
        ),
      );
      const sweeper = h.controlPlane.app.get(IdleSweeper);
      const actions = async (at: number) =>
        (await sweeper.sweep(at)).filter((a) => a.shardId === id).map((a) => a.kind);
      assert.deepEqual(await actions(t0 + 61_000), ['report']);
      assert.deepEqual(await actions(t0 + 121_000), ['suspend']);
      const now = await shard(id);
      assert.equal(now.state, 'SUSPENDING');
      assert.equal(now.memory.suspendCause, 'idle-suspend');
      const sent = commands.forShard(id).at(-1)!;
      assert.equal(sent.type === 'suspend' ? sent.cause : sent.type, 'idle-suspend');
      const kinds = await h.prisma.shardEvent.findMany({
        where: { shardId: id },
        orderBy: { id: 'asc' },
        select: { kind: true, state: true },
      });
      assert.deepEqual(kinds.slice(-2), [
        { kind: 'IDLE_SUSPEND', state: 'SUSPENDING' },
        { kind: 'STATE', state: 'SUSPENDING' },
      ]);
      assertOk(
        await h.graphql(
          `mutation ($teamId: ID!) { setTeamIdlePolicy(teamId: $teamId, idleAfterSeconds: null) { id } }`,
          { teamId: team.id },
        ),
      );
    });

    it('suspends idle elastic shards to make room for a waiting one', async () => {
      const host = 'elastic-3';
      await registerSuspending(host, 40 * GiB);
      // Suspending frees room on the GPU, never in its ratio: room for both caps is needed.
      assertOk(await h.graphql(OVERCOMMIT, { hostId: host, ratio: 2 }));
      const pool = { hostSelector: [{ key: 'pool', value: host }] };
      const idle = await running(host, 'nb-idle', '30g', { elastic: true });
      // Its host reports compute activity for it, and no kernel for ten minutes.
      const tenMinutesAgo = new Date(Date.now() - 600_000);
      await h.prisma.shardGpu.updateMany({
        where: { shardId: idle, releasedAt: null },
        data: { busyRatio: 0, lastKernelAt: tenMinutesAgo },
      });
      const waiting = assertOk(
        await createShard(h, team.member, {
          name: 'late',
          memoryPerGpu: '20g',
          queue: true,
          ...pool,
        }),
      ).createShard;
      assert.equal(waiting.state, 'PENDING');
      await queue.admitNow();
      const victim = await shard(idle);
      assert.equal(victim.state, 'SUSPENDING');
      assert.equal(victim.memory.suspendCause, 'make-room');
      const sent = commands.forShard(idle).at(-1)!;
      assert.equal(sent.type === 'suspend' ? sent.cause : sent.type, 'make-room');
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: idle } })).reclaimFor,
        waiting.id,
      );
      assert.equal((await shard(waiting.id)).state, 'PENDING');
      await suspended(host, idle, 20 * GiB);
      await queue.admitNow();
      assert.equal((await shard(waiting.id)).state, 'PLACED');
      // The idle shard stays suspended (nobody asked for it back).
      assert.equal((await shard(idle)).state, 'SUSPENDED');
    });

    it('a suspend its agent refused is not tried again for SUSPEND_RETRY_SECONDS: make-room and the idle policy pass over it, then try once more', async () => {
      const host = 'elastic-refused';
      await registerSuspending(host, 40 * GiB);
      assertOk(await h.graphql(OVERCOMMIT, { hostId: host, ratio: 2 }));
      const pool = { hostSelector: [{ key: 'pool', value: host }] };
      const idle = await running(host, 'nb-ipc', '30g', { elastic: true });
      const tenMinutesAgo = new Date(Date.now() - 600_000);
      await h.prisma.shard.update({ where: { id: idle }, data: { startedAt: tenMinutesAgo } });
      await h.prisma.shardGpu.updateMany({
        where: { shardId: idle, releasedAt: null },
        data: { busyRatio: 0, lastKernelAt: tenMinutesAgo },
      });
      const waiting = assertOk(
        await createShard(h, team.member, {
          name: 'late-2',
          memoryPerGpu: '20g',
          queue: true,
          ...pool,
        }),
      ).createShard;
      await queue.admitNow();
      assert.equal((await shard(idle)).state, 'SUSPENDING');
      // Its agent refuses (a process holds a CUDA IPC import) and says so as SUSPEND_FAILED.
      const reason =
        'suspend refused: shard nb-ipc cannot be suspended: process 4001 (pid 7 in its container) holds CUDA IPC imports';
      await fleet.applyShardStateEvent(
        host,
        stateEvent(host, idle, 'SUSPEND_FAILED', tick(), { reason }),
      );
      const refused = await shard(idle);
      assert.equal(refused.state, 'RUNNING');
      assert.equal(refused.memory.lastError, reason);
      const sent = commands.forShard(idle).length;
      await queue.admitNow();
      await queue.admitNow();
      assert.equal((await shard(idle)).state, 'RUNNING', 'make-room passed over it');
      assert.equal(commands.forShard(idle).length, sent, 'no suspend sent again');
      assert.equal((await shard(waiting.id)).state, 'PENDING');
      // Nor does the idle policy suspend it (it reports it idle).
      assertOk(
        await h.graphql(
          `mutation ($teamId: ID!) { setTeamIdlePolicy(teamId: $teamId, idleAfterSeconds: 60,
             suspendAfterSeconds: 120) { id } }`,
          { teamId: team.id },
        ),
      );
      const sweeper = h.controlPlane.app.get(IdleSweeper);
      const actions = async () =>
        (await sweeper.sweep(Date.now())).filter((a) => a.shardId === idle).map((a) => a.kind);
      assert.deepEqual(await actions(), ['report']);
      assert.deepEqual(await actions(), []);
      assert.equal((await shard(idle)).state, 'RUNNING');
      assertOk(
        await h.graphql(
          `mutation ($teamId: ID!) { setTeamIdlePolicy(teamId: $teamId, idleAfterSeconds: null) { id } }`,
          { teamId: team.id },
        ),
      );
      // Once the time is past, one more try: the cause may have gone.
      await h.prisma.shard.update({
        where: { id: idle },
        data: { lastEventAt: new Date(Date.now() - (SUSPEND_RETRY_SECONDS + 1) * 1000) },
      });
      await queue.admitNow();
      assert.equal((await shard(idle)).state, 'SUSPENDING');
      assert.equal(commands.forShard(idle).length, sent + 1);
    });
  });
}

import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { ManualClock } from './clock.js';
import { AgentReportsService } from './agent-reports.service.js';
import { HostLivenessService } from './host-liveness.service.js';
import { HostOfflineSweeper } from './host-offline-sweeper.js';
import { StuckShardSweeper } from './stuck-shard-sweeper.js';
import { Registry } from 'prom-client';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  gpuUuidOf,
  heartbeat,
  MiB,
  registerRequest,
  reservedOn,
  stateEvent,
  type TestTeam,
} from '../testing/fleet-fixtures.js';

/** The fleet: agent messages, host queries, operator mutations, the offline sweeper. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const OFFLINE_SECONDS = 30;

const HOST = `query ($id: ID!) {
  host(id: $id) {
    id name state cordoned labels { key value } contextOverhead { bytes } simulated lastHeartbeatAt
    memory { total { bytes } capacity { bytes } reserved { bytes } free { bytes } }
    gpus { uuid index model total { bytes } reserved { bytes } free { bytes } used { bytes } missingSince }
  }
}`;
const HOSTS = `query ($first: Int, $after: String, $states: [HostState!]) {
  hosts(first: $first, after: $after, states: $states) {
    edges { node { id state } } pageInfo { hasNextPage endCursor }
  }
}`;
const GPUS = `query ($hostId: ID, $model: String) {
  gpus(hostId: $hostId, model: $model, first: 500) { edges { node { uuid hostId model free { bytes } } } }
}`;
const CORDON = `mutation ($id: ID!) { cordonHost(id: $id) { id state cordoned } }`;
const UNCORDON = `mutation ($id: ID!) { uncordonHost(id: $id) { id state cordoned } }`;
const DRAIN = `mutation ($id: ID!) { drainHost(id: $id) { id state cordoned } }`;

interface HostResult {
  id: string;
  state: string;
  cordoned: boolean;
  lastHeartbeatAt: string | null;
  memory: Record<string, { bytes: string }>;
  gpus: {
    uuid: string;
    reserved: { bytes: string };
    free: { bytes: string };
    used: { bytes: string };
    missingSince: string | null;
  }[];
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`fleet on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    let sweeper: HostOfflineSweeper;
    const clock = new ManualClock(new Date('2030-01-01T00:00:00Z'));
    const commands = new FakeShardCommands();
    /** The control plane's log lines (warn and above). */
    let warnings = '';
    let team: TestTeam;
    let other: TestTeam;

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: {
          clock,
          shardCommands: commands,
          hostOfflineSeconds: OFFLINE_SECONDS,
          // Warnings kept, to find the stuck-shard lines in.
          logLevel: 'warn',
          logDestination: new Writable({
            write(chunk: Buffer, _encoding, done) {
              warnings += chunk.toString();
              done();
            },
          }),
        },
      });
      fleet = h.controlPlane.app.get(AgentReportsService);
      sweeper = h.controlPlane.app.get(HostOfflineSweeper);
      team = await createTestTeam(h, 'fleet-team');
      other = await createTestTeam(h, 'other-team');
    });
    after(async () => {
      await h?.close();
    });

    async function host(id: string, token = h.adminToken): Promise<HostResult> {
      return assertOk(await h.graphql<{ host: HostResult }>(HOST, { id }, token)).host;
    }

    async function place(pool: string, memoryPerGpu = '10g', token = team.member, gpuCount = 1) {
      return createShard(h, token, {
        memoryPerGpu,
        gpuCount,
        hostSelector: [{ key: 'pool', value: pool }],
      });
    }

    /** Advances the clock past the offline deadline and sweeps; returns the hosts marked. */
    async function letTimePass(heartbeating: string[] = []): Promise<string[]> {
      clock.advance((OFFLINE_SECONDS + 1) * 1000);
      for (const id of heartbeating) await fleet.recordHeartbeat(id, heartbeat(id, clock.now()));
      return sweeper.sweep();
    }

    it('registerHost writes the host and its GPUs; every token sees hosts with total, reserved and free', async () => {
      const reply = await fleet.registerHost(
        registerRequest('reg-1', {
          gpus: 2,
          labels: { pool: 'reg', zone: 'eu-1' },
          overheadBytes: 300 * MiB,
        }),
      );
      assert.deepEqual(reply, {
        protocolVersion: 1,
        hostId: 'reg-1',
        accepted: true,
        desired: [],
        stoppedShardIds: [],
      });
      const shard = assertOk(await place('reg', '20g')).createShard;
      assert.equal(
        shard.limitPerGpu.bytes,
        String(20 * GiB + 300 * MiB),
        "the host's own overhead",
      );
      for (const token of [h.adminToken, team.viewer, other.member]) {
        const seen = await host('reg-1', token);
        assert.equal(seen.state, 'ONLINE');
        assert.deepEqual(seen.memory, {
          total: { bytes: String(160 * GiB) },
          capacity: { bytes: String(160 * GiB) },
          reserved: { bytes: String(20 * GiB + 300 * MiB) },
          free: { bytes: String(140 * GiB - 300 * MiB) },
        });
      }
      const audit = await h.prisma.auditEvent.findFirstOrThrow({
        where: { action: 'host.register', targetId: 'reg-1' },
      });
      assert.equal(audit.actorTokenId, null);
      const gpus = assertOk(
        await h.graphql<{ gpus: { edges: { node: { uuid: string; free: { bytes: string } } }[] } }>(
          GPUS,
          { hostId: 'reg-1' },
          other.viewer,
        ),
      );
      assert.deepEqual(
        gpus.gpus.edges.map((e) => e.node.uuid),
        [gpuUuidOf('reg-1', 0), gpuUuidOf('reg-1', 1)],
      );
      const h100 = assertOk(
        await h.graphql<{ gpus: { edges: unknown[] } }>(GPUS, { model: 'h100' }, other.viewer),
      );
      assert.ok(h100.gpus.edges.length >= 2);
      assertError(await h.graphql(HOST, { id: 'no-such-host' }), 'NOT_FOUND');
      assertError(await h.graphql(HOST, { id: "'; DROP TABLE host; --" }), 'BAD_USER_INPUT');
      assertError(await h.graphql(HOST, { id: 'reg-1' }, null), 'UNAUTHENTICATED');
    });

    it('hosts: a Relay connection by id, filtered by state', async () => {
      for (const id of ['page-a', 'page-b', 'page-c'])
        await fleet.registerHost(registerRequest(id, { labels: { pool: 'page' } }));
      type Page = {
        hosts: {
          edges: { node: { id: string } }[];
          pageInfo: { hasNextPage: boolean; endCursor: string };
        };
      };
      const all: string[] = [];
      let after: string | undefined;
      for (;;) {
        const page = assertOk(
          await h.graphql<Page>(HOSTS, { first: 2, ...(after ? { after } : {}) }, team.viewer),
        ).hosts;
        all.push(...page.edges.map((e) => e.node.id));
        if (!page.pageInfo.hasNextPage) break;
        after = page.pageInfo.endCursor;
      }
      assert.equal(new Set(all).size, all.length, 'no host twice');
      assert.ok(['page-a', 'page-b', 'page-c'].every((id) => all.includes(id)));
      assertOk(await h.graphql(CORDON, { id: 'page-b' }));
      const cordoned = assertOk(
        await h.graphql<Page>(HOSTS, { states: ['CORDONED'] }, team.viewer),
      ).hosts;
      assert.ok(cordoned.edges.some((e) => e.node.id === 'page-b'));
      assert.ok(!cordoned.edges.some((e) => e.node.id === 'page-a'));
    });

    it('re-registering keeps reservations; a GPU no longer listed takes no new shards', async () => {
      await fleet.registerHost(registerRequest('rereg-1', { gpus: 2, labels: { pool: 'rereg' } }));
      const shard = assertOk(await place('rereg', '30g')).createShard;
      const gpu = shard.gpus[0]!.gpuUuid;
      await fleet.applyShardStateEvent(
        'rereg-1',
        stateEvent('rereg-1', shard.id, 'RUNNING', clock.now()),
      );
      const request = registerRequest('rereg-1', {
        gpus: 2,
        labels: { pool: 'rereg' },
        runningShards: [{ shardId: shard.id, containerId: 'c1', state: 'RUNNING' }],
      });
      const reply = await fleet.registerHost(request);
      assert.equal(reply.accepted, true);
      if (reply.accepted)
        assert.deepEqual(
          reply.desired.map((spec) => spec.shardId),
          [shard.id],
        );
      assert.equal(await reservedOn(h, gpu), 30 * GiB + 512 * MiB);
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: shard.id } })).state,
        'RUNNING',
      );
      // The GPU without the shard disappears from the registration.
      const gone = gpu === gpuUuidOf('rereg-1', 0) ? 1 : 0;
      await fleet.registerHost({ ...request, gpus: request.gpus.filter((g) => g.index !== gone) });
      const seen = await host('rereg-1');
      assert.ok(seen.gpus.find((g) => g.uuid === gpuUuidOf('rereg-1', gone))?.missingSince);
      assert.equal(seen.memory['total']!.bytes, String(80 * GiB));
      assertError(await place('rereg', '50g'), 'NO_CAPACITY', 'the missing GPU is not used');
    });

    it('recordHeartbeat stores used bytes and writes usage samples once per sentAt', async () => {
      await fleet.registerHost(registerRequest('beat-1', { gpus: 1, labels: { pool: 'beat' } }));
      const shard = assertOk(await place('beat', '10g')).createShard;
      const gpu = gpuUuidOf('beat-1', 0);
      const message = heartbeat(
        'beat-1',
        clock.now(),
        [
          { shardId: shard.id, usedBytesPerGpu: [{ gpuUuid: gpu, usedBytes: 3 * GiB }] },
          { shardId: 'not-a-uuid', usedBytesPerGpu: [{ gpuUuid: gpu, usedBytes: 1 }] },
        ],
        [{ uuid: gpu, usedBytes: 5 * GiB }],
      );
      assert.deepEqual(await fleet.recordHeartbeat('beat-1', message), {
        known: true,
        revived: false,
        samplesWritten: 1,
      });
      assert.deepEqual(
        await fleet.recordHeartbeat('beat-1', message),
        { known: true, revived: false, samplesWritten: 0 },
        'a repeat is ignored',
      );
      assert.equal(await h.prisma.usageSample.count({ where: { shardId: shard.id } }), 1);
      const seen = await host('beat-1');
      assert.equal(seen.gpus[0]!.used.bytes, String(5 * GiB));
      assert.equal(seen.lastHeartbeatAt, clock.now().toISOString());
      const held = await h.prisma.shardGpu.findFirstOrThrow({ where: { shardId: shard.id } });
      assert.equal(held.usedBytes, BigInt(3 * GiB));
      // Another host cannot report for this shard.
      await fleet.registerHost(
        registerRequest('beat-2', { gpus: 1, labels: { pool: 'beat-other' } }),
      );
      const foreign = heartbeat('beat-2', new Date(clock.now().getTime() + 1000), [
        { shardId: shard.id, usedBytesPerGpu: [{ gpuUuid: gpu, usedBytes: 7 * GiB }] },
      ]);
      assert.equal((await fleet.recordHeartbeat('beat-2', foreign)).samplesWritten, 0);
      assert.deepEqual(
        await fleet.recordHeartbeat('never-registered', heartbeat('never-registered', clock.now())),
        {
          known: false,
          revived: false,
          samplesWritten: 0,
        },
      );
    });

    it('recordHeartbeats: a batch of hosts in one write, each host only for its own GPUs and shards', async () => {
      for (const id of ['batch-1', 'batch-2']) {
        await fleet.registerHost(registerRequest(id, { gpus: 1, labels: { pool: id } }));
      }
      const one = assertOk(await place('batch-1', '10g')).createShard;
      const two = assertOk(await place('batch-2', '10g')).createShard;
      const gpu1 = gpuUuidOf('batch-1', 0);
      const gpu2 = gpuUuidOf('batch-2', 0);
      const at = new Date(clock.now().getTime() + 5000);
      const outcomes = await fleet.recordHeartbeats([
        {
          hostId: 'batch-1',
          heartbeat: heartbeat(
            'batch-1',
            at,
            [{ shardId: one.id, usedBytesPerGpu: [{ gpuUuid: gpu1, usedBytes: 2 * GiB }] }],
            // batch-2's GPU: not batch-1's to report.
            [
              { uuid: gpu1, usedBytes: 4 * GiB },
              { uuid: gpu2, usedBytes: 9 * GiB },
            ],
          ),
        },
        { hostId: 'never-registered', heartbeat: heartbeat('never-registered', at) },
        {
          hostId: 'batch-2',
          heartbeat: heartbeat(
            'batch-2',
            at,
            [
              { shardId: two.id, usedBytesPerGpu: [{ gpuUuid: gpu2, usedBytes: 6 * GiB }] },
              // batch-1's shard: ignored.
              { shardId: one.id, usedBytesPerGpu: [{ gpuUuid: gpu1, usedBytes: 8 * GiB }] },
            ],
            [{ uuid: gpu2, usedBytes: 7 * GiB }],
          ),
        },
      ]);
      assert.deepEqual(outcomes, [
        { known: true, revived: false, samplesWritten: 1 },
        { known: false, revived: false, samplesWritten: 0 },
        { known: true, revived: false, samplesWritten: 1 },
      ]);
      assert.equal((await host('batch-1')).gpus[0]!.used.bytes, String(4 * GiB));
      assert.equal((await host('batch-2')).gpus[0]!.used.bytes, String(7 * GiB));
      const used = async (shardId: string) =>
        (await h.prisma.shardGpu.findFirstOrThrow({ where: { shardId } })).usedBytes;
      assert.equal(await used(one.id), BigInt(2 * GiB));
      assert.equal(await used(two.id), BigInt(6 * GiB));
      const samples = await h.prisma.usageSample.findMany({
        where: { shardId: { in: [one.id, two.id] }, at },
        orderBy: { usedBytes: 'asc' },
      });
      assert.deepEqual(
        samples.map((s) => [s.shardId, s.usedBytes]),
        [
          [one.id, BigInt(2 * GiB)],
          [two.id, BigInt(6 * GiB)],
        ],
      );
    });

    it('applyShardStateEvent: lifecycle, stale events ignored, ends release the reservation', async () => {
      await fleet.registerHost(registerRequest('events-1', { gpus: 1, labels: { pool: 'ev' } }));
      const gpu = gpuUuidOf('events-1', 0);
      const shard = assertOk(await place('ev', '10g')).createShard;
      const t0 = clock.now().getTime();
      const at = (seconds: number) => new Date(t0 + seconds * 1000);
      assert.deepEqual(
        await fleet.applyShardStateEvent(
          'events-1',
          stateEvent('events-1', shard.id, 'PULLING', at(1)),
        ),
        { applied: true, state: 'STARTING' },
      );
      assert.deepEqual(
        await fleet.applyShardStateEvent(
          'events-1',
          stateEvent('events-1', shard.id, 'RUNNING', at(3), { containerId: 'abc123' }),
        ),
        { applied: true, state: 'RUNNING' },
      );
      assert.deepEqual(
        await fleet.applyShardStateEvent(
          'events-1',
          stateEvent('events-1', shard.id, 'STARTING', at(2)),
        ),
        { applied: false, reason: 'stale' },
      );
      assert.deepEqual(
        await fleet.applyShardStateEvent(
          'events-1',
          stateEvent('events-1', shard.id, 'RUNNING', at(3)),
        ),
        { applied: false, reason: 'stale' },
      );
      assert.deepEqual(
        await fleet.applyShardStateEvent(
          'other-host',
          stateEvent('other-host', shard.id, 'EXITED', at(4)),
        ),
        { applied: false, reason: 'other-host' },
      );
      assert.deepEqual(
        await fleet.applyShardStateEvent(
          'events-1',
          stateEvent('events-1', '4b1c3f0e-0000-4000-8000-000000000000', 'RUNNING', at(4)),
        ),
        { applied: false, reason: 'unknown-shard' },
      );
      let row = await h.prisma.shard.findUniqueOrThrow({ where: { id: shard.id } });
      assert.equal(row.state, 'RUNNING');
      assert.equal(row.containerId, 'abc123');
      assert.equal(row.startedAt?.toISOString(), at(3).toISOString());
      assert.equal(await reservedOn(h, gpu), 10 * GiB + 512 * MiB);
      assert.deepEqual(
        await fleet.applyShardStateEvent(
          'events-1',
          stateEvent('events-1', shard.id, 'EXITED', at(5), { exitCode: 3 }),
        ),
        { applied: true, state: 'EXITED' },
      );
      row = await h.prisma.shard.findUniqueOrThrow({ where: { id: shard.id } });
      assert.equal(row.exitCode, 3);
      assert.equal(await reservedOn(h, gpu), 0);
      assert.deepEqual(
        await fleet.applyShardStateEvent(
          'events-1',
          stateEvent('events-1', shard.id, 'RUNNING', at(6)),
        ),
        { applied: false, reason: 'not-applicable' },
      );
      const failing = assertOk(await place('ev', '10g')).createShard;
      assert.deepEqual(
        await fleet.applyShardStateEvent(
          'events-1',
          stateEvent('events-1', failing.id, 'FAILED', at(7), {
            reason: 'pull failed: unauthorized',
          }),
        ),
        { applied: true, state: 'FAILED' },
      );
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: failing.id } })).failureReason,
        'pull failed: unauthorized',
      );
      assert.equal(await reservedOn(h, gpu), 0);
      const vanishing = assertOk(await place('ev', '10g')).createShard;
      await fleet.applyShardStateEvent(
        'events-1',
        stateEvent('events-1', vanishing.id, 'VANISHED', at(8)),
      );
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: vanishing.id } })).state,
        'FAILED',
      );
      assert.equal(await reservedOn(h, gpu), 0);
    });

    it('applyShardStateEvents: a batch applies each event as alone would, in order per shard, in one transaction', async () => {
      await fleet.registerHost(registerRequest('events-b', { gpus: 1, labels: { pool: 'evb' } }));
      const gpu = gpuUuidOf('events-b', 0);
      const first = assertOk(await place('evb', '10g')).createShard;
      const second = assertOk(await place('evb', '10g')).createShard;
      const t0 = clock.now().getTime();
      const at = (seconds: number) => new Date(t0 + seconds * 1000);
      const on = (
        shardId: string,
        state: Parameters<typeof stateEvent>[2],
        seconds: number,
        extra: Parameters<typeof stateEvent>[4] = {},
      ) => ({
        hostId: 'events-b',
        event: stateEvent('events-b', shardId, state, at(seconds), extra),
      });
      const outcomes = await fleet.applyShardStateEvents([
        on(first.id, 'STARTING', 1),
        on(second.id, 'STARTING', 1),
        on(first.id, 'RUNNING', 2, { containerId: 'c-first' }),
        // Older than the one before it for the same shard: stale within the batch.
        on(first.id, 'STARTING', 1.5),
        { hostId: 'other', event: stateEvent('other', second.id, 'EXITED', at(2)) },
        on('not-a-uuid', 'RUNNING', 2),
        on(second.id, 'EXITED', 3, { exitCode: 7 }),
      ]);
      assert.deepEqual(outcomes, [
        { applied: true, state: 'STARTING' },
        { applied: true, state: 'STARTING' },
        { applied: true, state: 'RUNNING' },
        { applied: false, reason: 'stale' },
        { applied: false, reason: 'other-host' },
        { applied: false, reason: 'unknown-shard' },
        { applied: true, state: 'EXITED' },
      ]);
      const rows = await h.prisma.shard.findMany({
        where: { id: { in: [first.id, second.id] } },
        select: { id: true, state: true, containerId: true, exitCode: true },
      });
      assert.deepEqual(Object.fromEntries(rows.map(({ id, ...rest }) => [id, rest])), {
        [first.id]: { state: 'RUNNING', containerId: 'c-first', exitCode: null },
        [second.id]: { state: 'EXITED', containerId: null, exitCode: 7 },
      });
      // Only the exited shard's reservation was given back.
      assert.equal(await reservedOn(h, gpu), 10 * GiB + 512 * MiB);
    });

    it('reconcile settles missed events and replies with what should run and what stays stopped', async () => {
      await fleet.registerHost(registerRequest('rec-1', { gpus: 2, labels: { pool: 'rec' } }));
      const running = assertOk(await place('rec', '10g')).createShard;
      const stopping = assertOk(await place('rec', '10g')).createShard;
      assertOk(
        await h.graphql(
          `mutation ($id: ID!) { stopShard(id: $id) { id } }`,
          { id: stopping.id },
          team.member,
        ),
      );
      const reply = await fleet.reconcile('rec-1', {
        protocolVersion: 1,
        hostId: 'rec-1',
        containers: [{ shardId: running.id, containerId: 'c-running', running: true }],
      });
      assert.deepEqual(
        reply.desired.map((spec) => [spec.shardId, spec.gpus.map((g) => g.limitBytes)]),
        [[running.id, [10 * GiB + 512 * MiB]]],
      );
      assert.deepEqual(reply.stoppedShardIds, [stopping.id]);
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: running.id } })).state,
        'RUNNING',
      );
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: stopping.id } })).state,
        'STOPPED',
      );
      assert.equal(
        await h.prisma.shardGpu.count({ where: { shardId: stopping.id, releasedAt: null } }),
        0,
      );
      await assert.rejects(
        fleet.reconcile('unknown-host', {
          protocolVersion: 1,
          hostId: 'unknown-host',
          containers: [],
        }),
        /not found/,
      );
    });

    it('an agent killed between docker create and docker start: the shard stays desired with its reservation, and a dated report settles the rest by the convergence table', async () => {
      await fleet.registerHost(registerRequest('crash-1', { gpus: 2, labels: { pool: 'crash' } }));
      const gpus = [gpuUuidOf('crash-1', 0), gpuUuidOf('crash-1', 1)];
      const created = assertOk(await place('crash', '4g')).createShard;
      const adopted = assertOk(await place('crash', '4g')).createShard;
      const stopping = assertOk(await place('crash', '4g')).createShard;
      const vanished = assertOk(await place('crash', '4g')).createShard;
      const newer = assertOk(await place('crash', '4g')).createShard;
      const t = (s: number) => new Date(clock.now().getTime() + s * 1000);
      await fleet.applyShardStateEvent(
        'crash-1',
        stateEvent('crash-1', created.id, 'STARTING', t(1)),
      );
      await fleet.applyShardStateEvent(
        'crash-1',
        stateEvent('crash-1', vanished.id, 'RUNNING', t(1)),
      );
      assertOk(
        await h.graphql(
          `mutation ($id: ID!) { stopShard(id: $id) { id } }`,
          { id: stopping.id },
          team.member,
        ),
      );
      // The newer shard's RUNNING event was applied after the agent looked: not settled from it.
      await fleet.applyShardStateEvent('crash-1', stateEvent('crash-1', newer.id, 'RUNNING', t(3)));
      const reservedBefore = (await reservedOn(h, gpus[0]!)) + (await reservedOn(h, gpus[1]!));
      const reply = await fleet.reconcile('crash-1', {
        protocolVersion: 1,
        hostId: 'crash-1',
        observedAt: t(2).toISOString(),
        containers: [
          { shardId: created.id, containerId: 'c-created', running: false, status: 'created' },
          { shardId: adopted.id, containerId: 'c-adopted', running: true, status: 'running' },
          {
            shardId: stopping.id,
            containerId: 'c-stopping',
            running: false,
            status: 'exited',
            exitCode: 143,
          },
        ],
      });
      const state = async (id: string) => h.prisma.shard.findUniqueOrThrow({ where: { id } });
      assert.equal((await state(created.id)).state, 'STARTING');
      assert.ok(
        reply.desired.some((spec) => spec.shardId === created.id),
        'still to be launched',
      );
      assert.equal(
        await h.prisma.shardGpu.count({ where: { shardId: created.id, releasedAt: null } }),
        1,
      );
      const running = await state(adopted.id);
      assert.deepEqual([running.state, running.containerId], ['RUNNING', 'c-adopted']);
      const stopped = await state(stopping.id);
      assert.deepEqual([stopped.state, stopped.exitCode], ['STOPPED', 143]);
      const failed = await state(vanished.id);
      assert.equal(failed.state, 'FAILED');
      assert.match(failed.failureReason ?? '', /container is gone/);
      assert.equal((await state(newer.id)).state, 'RUNNING');
      const reservedAfter = (await reservedOn(h, gpus[0]!)) + (await reservedOn(h, gpus[1]!));
      assert.equal(
        reservedBefore - reservedAfter,
        2 * (4 * GiB + 512 * MiB),
        'the stopped and the failed shard released theirs',
      );
      // The relaunch by the restarted agent reports as any launch does.
      await fleet.applyShardStateEvent(
        'crash-1',
        stateEvent('crash-1', created.id, 'RUNNING', t(4)),
      );
      assert.equal((await state(created.id)).state, 'RUNNING');
    });

    it('a shard stuck in PLACED or STOPPING: one event and warning per stay, the stuck gauge, and its launch or stop sent again', async () => {
      await fleet.registerHost(registerRequest('stuck-1', { gpus: 1, labels: { pool: 'stuck' } }));
      const placed = assertOk(await place('stuck', '4g')).createShard;
      const stopping = assertOk(await place('stuck', '4g')).createShard;
      assertOk(
        await h.graphql(
          `mutation ($id: ID!) { stopShard(id: $id) { id } }`,
          { id: stopping.id },
          team.member,
        ),
      );
      const sweeper = h.controlPlane.app.get(StuckShardSweeper);
      const sent = (id: string, type: string) =>
        commands.forShard(id).filter((command) => command.type === type).length;
      const launches = sent(placed.id, 'launch');
      const stops = sent(stopping.id, 'stop');
      // Not stuck yet a minute later (PLACED may take 120 s, STOPPING 660 s by default).
      const soon = await sweeper.sweep(new Date(Date.now() + 60_000));
      assert.ok(!soon.some((s) => s.id === placed.id || s.id === stopping.id));
      const later = new Date(Date.now() + 3600_000);
      const stuck = await sweeper.sweep(later);
      assert.deepEqual(
        stuck
          .filter((s) => s.id === placed.id || s.id === stopping.id)
          .map((s) => [s.id, s.state, s.action])
          .sort(),
        [
          [placed.id, 'PLACED', 'resend-launch'],
          [stopping.id, 'STOPPING', 'resend-stop'],
        ].sort(),
      );
      assert.equal(sent(placed.id, 'launch'), launches + 1);
      assert.equal(sent(stopping.id, 'stop'), stops + 1);
      const gauge = await h.controlPlane.app
        .get(Registry)
        .getSingleMetricAsString('gpushards_shards_stuck');
      assert.match(gauge, /gpushards_shards_stuck\{state="PLACED"\} [1-9]/);
      assert.match(gauge, /gpushards_shards_stuck\{state="STOPPING"\} [1-9]/);
      // The same stay: no second event, and no second command within the limit.
      await sweeper.sweep(new Date(later.getTime() + 1000));
      const events = await h.prisma.auditEvent.findMany({
        where: { action: 'shard.stuck', targetId: { in: [placed.id, stopping.id] } },
      });
      assert.equal(events.length, 2);
      // One warning line per stay, naming the shard, its team and its host.
      const lines = warnings
        .split('\n')
        .filter((line) => line.includes('"shard stuck in '))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      for (const [shard, state] of [
        [placed, 'PLACED'],
        [stopping, 'STOPPING'],
      ] as const) {
        const mine = lines.filter((line) => line.shardId === shard.id);
        assert.equal(mine.length, 1, `${state}: ${JSON.stringify(lines)}`);
        assert.equal(mine[0]!.level, 40);
        assert.equal(mine[0]!.msg, `shard stuck in ${state}`);
        assert.equal(mine[0]!.teamId, team.id);
        assert.equal(mine[0]!.hostId, 'stuck-1');
      }
      assert.equal(sent(placed.id, 'launch'), launches + 1);
      // A control plane that starts sends the launches and stops in flight again at once.
      const launchesBefore = sent(placed.id, 'launch');
      const asked = () =>
        commands.recorded.filter((c) => c.type === 'reconcile' && c.hostId === 'stuck-1').length;
      const askedBefore = asked();
      assert.ok((await sweeper.resendOnStart()) >= 2);
      // And every host that is not OFFLINE is asked to reconcile now.
      assert.equal(asked(), askedBefore + 1);
      assert.equal(sent(placed.id, 'launch'), launchesBefore + 1);
      assert.equal(sent(stopping.id, 'stop'), stops + 2);
      // Its agent answers: no longer stuck.
      await fleet.applyShardStateEvent(
        'stuck-1',
        stateEvent('stuck-1', placed.id, 'RUNNING', clock.now()),
      );
      const after = await sweeper.sweep(new Date(later.getTime() + 2000));
      assert.ok(!after.some((s) => s.id === placed.id));
    });

    it('reconcile ends a RUNNING shard whose container stopped while its exit event was lost', async () => {
      await fleet.registerHost(registerRequest('rec-2', { gpus: 1, labels: { pool: 'rec2' } }));
      const gpu = (await h.prisma.gpu.findFirstOrThrow({ where: { hostId: 'rec-2' } })).uuid;
      const shard = assertOk(await place('rec2', '10g')).createShard;
      const report = (running: boolean) =>
        fleet.reconcile('rec-2', {
          protocolVersion: 1,
          hostId: 'rec-2',
          containers: [{ shardId: shard.id, containerId: 'c-1', running }],
        });
      await report(true);
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: shard.id } })).state,
        'RUNNING',
      );
      const reply = await report(false);
      const ended = await h.prisma.shard.findUniqueOrThrow({ where: { id: shard.id } });
      assert.equal(ended.state, 'EXITED');
      assert.match(ended.failureReason ?? '', /found stopped by reconciliation/);
      assert.equal(await reservedOn(h, gpu), 0);
      assert.deepEqual(reply.desired, []);
    });

    it('cordon, uncordon and drain are for admins; cordoned and draining hosts take no shards; drain stops every shard', async () => {
      await fleet.registerHost(registerRequest('op-1', { gpus: 2, labels: { pool: 'op' } }));
      const keep = assertOk(await place('op', '10g')).createShard;
      const theirs = assertOk(await place('op', '10g', other.member)).createShard;
      for (const mutation of [CORDON, UNCORDON, DRAIN]) {
        assertError(await h.graphql(mutation, { id: 'op-1' }, team.member), 'FORBIDDEN');
      }
      assertError(await h.graphql(CORDON, { id: 'nope' }), 'NOT_FOUND');
      assertError(await h.graphql(CORDON, { id: 'bad id!' }), 'BAD_USER_INPUT');
      assert.equal(
        await h.prisma.auditEvent.count({
          where: { targetId: 'op-1', action: { startsWith: 'host.c' } },
        }),
        0,
      );

      assert.deepEqual(assertOk(await h.graphql(CORDON, { id: 'op-1' })), {
        cordonHost: { id: 'op-1', state: 'CORDONED', cordoned: true },
      });
      const refused = await place('op', '1g');
      assertError(refused, 'NO_CAPACITY');
      assert.match(JSON.stringify(refused.errors![0]!.extensions!['hosts']), /op-1[^}]*cordoned/);
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: keep.id } })).state,
        'PLACED',
        'cordon keeps shards',
      );
      assertOk(await h.graphql(CORDON, { id: 'op-1' }));
      assert.equal(
        await h.prisma.auditEvent.count({ where: { targetId: 'op-1', action: 'host.cordon' } }),
        1,
        'a second cordon changes nothing',
      );
      assert.equal(
        assertOk(await h.graphql<{ uncordonHost: { state: string } }>(UNCORDON, { id: 'op-1' }))
          .uncordonHost.state,
        'ONLINE',
      );
      assertOk(await place('op', '1g'));

      const drained = assertOk(
        await h.graphql<{ drainHost: { state: string; cordoned: boolean } }>(DRAIN, { id: 'op-1' }),
      ).drainHost;
      assert.deepEqual(drained, { id: 'op-1', state: 'DRAINING', cordoned: true });
      const onHost = await h.prisma.shard.findMany({ where: { hostId: 'op-1' } });
      assert.ok(
        onHost.every((s) => s.state === 'STOPPING'),
        JSON.stringify(onHost.map((s) => s.state)),
      );
      for (const shard of [keep, theirs]) {
        assert.equal(commands.forShard(shard.id).at(-1)?.type, 'stop');
      }
      assertError(await place('op', '1g'), 'NO_CAPACITY');
      const total = await h.prisma.shard.count();
      await fleet.applyShardStateEvent('op-1', stateEvent('op-1', keep.id, 'STOPPED', clock.now()));
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: keep.id } })).state,
        'STOPPED',
      );
      assert.equal(await h.prisma.shard.count(), total, 'drained shards are not placed elsewhere');
      assert.equal(
        await h.prisma.auditEvent.count({ where: { targetId: 'op-1', action: 'host.drain' } }),
        1,
      );
      assert.equal(
        assertOk(await h.graphql<{ uncordonHost: { state: string } }>(UNCORDON, { id: 'op-1' }))
          .uncordonHost.state,
        'ONLINE',
      );
    });

    it('offline sweeper: silent hosts go OFFLINE, their shards LOST and released, nothing rescheduled; a cordon survives', async () => {
      await fleet.registerHost(registerRequest('sweep-1', { gpus: 1, labels: { pool: 'sweep' } }));
      await fleet.registerHost(registerRequest('sweep-2', { gpus: 1, labels: { pool: 'sweep' } }));
      await fleet.registerHost(
        registerRequest('sweep-3', { gpus: 1, labels: { pool: 'sweep-c' } }),
      );
      assertOk(await h.graphql(CORDON, { id: 'sweep-3' }));
      const lost = assertOk(await place('sweep', '50g')).createShard;
      const kept = assertOk(await place('sweep', '50g')).createShard;
      const lostHost = lost.hostId!;
      const liveHost = kept.hostId!;
      assert.notEqual(lostHost, liveHost);
      // Every other host of this file keeps heartbeating.
      const others = (
        await h.prisma.host.findMany({
          where: { id: { notIn: [lostHost, 'sweep-3'] }, state: { not: 'OFFLINE' } },
        })
      ).map((x) => x.id);
      const shardsBefore = await h.prisma.shard.count();
      const marked = await letTimePass(others);
      assert.deepEqual(marked.sort(), [lostHost, 'sweep-3'].sort());
      assert.equal((await host(lostHost)).state, 'OFFLINE');
      const row = await h.prisma.shard.findUniqueOrThrow({ where: { id: lost.id } });
      assert.equal(row.state, 'LOST');
      assert.equal(await reservedOn(h, gpuUuidOf(lostHost, 0)), 0);
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: kept.id } })).state,
        'PLACED',
      );
      assert.equal(await h.prisma.shard.count(), shardsBefore, 'nothing was rescheduled');
      assert.equal(
        await h.prisma.auditEvent.count({ where: { action: 'host.offline', targetId: lostHost } }),
        1,
      );
      assert.equal(
        await h.prisma.auditEvent.count({
          where: { action: 'shard.lost', targetId: lost.id, teamId: team.id },
        }),
        1,
      );
      assert.deepEqual(await sweeper.sweep(), [], 'marked once');
      const usage = assertOk(
        await h.graphql<{ team: { usage: { shardCount: number } } }>(
          `query ($id: ID!) { team(id: $id) { usage { shardCount } } }`,
          { id: team.id },
          team.viewer,
        ),
      );
      assert.ok(usage.team.usage.shardCount > 0, 'LOST still counts against the quota');

      // The host comes back still running the shard: it takes the reservation again.
      await fleet.recordHeartbeat(
        lostHost,
        heartbeat(lostHost, clock.now(), [
          {
            shardId: lost.id,
            usedBytesPerGpu: [{ gpuUuid: gpuUuidOf(lostHost, 0), usedBytes: GiB }],
          },
        ]),
      );
      assert.equal((await host(lostHost)).state, 'ONLINE');
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: lost.id } })).state,
        'RUNNING',
      );
      assert.equal(await reservedOn(h, gpuUuidOf(lostHost, 0)), 50 * GiB + 512 * MiB);
      // The cordoned host comes back cordoned.
      await fleet.registerHost(
        registerRequest('sweep-3', { gpus: 1, labels: { pool: 'sweep-c' } }),
      );
      assert.deepEqual(
        { state: (await host('sweep-3')).state, cordoned: (await host('sweep-3')).cordoned },
        { state: 'CORDONED', cordoned: true },
      );
    });

    it('a host the sweep cannot mark leaves it and marks the hosts after it; the next sweep marks it', async () => {
      await fleet.registerHost(registerRequest('refuses-1', { gpus: 1 }));
      await fleet.registerHost(registerRequest('refuses-2', { gpus: 1 }));
      // The first of the two (the sweep goes in id order) cannot be marked: its update fails.
      await h.prisma.$executeRawUnsafe(
        `CREATE FUNCTION refuse_offline() RETURNS trigger LANGUAGE plpgsql
           AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`,
      );
      await h.prisma.$executeRawUnsafe(
        `CREATE TRIGGER refuse_offline BEFORE UPDATE ON host FOR EACH ROW
           WHEN (NEW.id = 'refuses-1' AND NEW.state = 'OFFLINE') EXECUTE FUNCTION refuse_offline()`,
      );
      try {
        const others = (
          await h.prisma.host.findMany({
            where: { id: { notIn: ['refuses-1', 'refuses-2'] }, state: { not: 'OFFLINE' } },
          })
        ).map((x) => x.id);
        assert.deepEqual(await letTimePass(others), ['refuses-2']);
        assert.equal((await host('refuses-1')).state, 'ONLINE');
        const logged = warnings.split('\n').find((line) => line.includes('silent host OFFLINE'));
        assert.match(logged ?? '', /"hostId":"refuses-1"/);
      } finally {
        await h.prisma.$executeRawUnsafe('DROP TRIGGER refuse_offline ON host');
        await h.prisma.$executeRawUnsafe('DROP FUNCTION refuse_offline()');
      }
      assert.deepEqual(await sweeper.sweep(), ['refuses-1']);
    });

    it('a host that comes back without its shard fails it; stopping a shard on an OFFLINE host stops it at once', async () => {
      await fleet.registerHost(registerRequest('gone-1', { gpus: 2, labels: { pool: 'gone' } }));
      const vanished = assertOk(await place('gone', '10g')).createShard;
      const stopped = assertOk(await place('gone', '10g')).createShard;
      const others = (
        await h.prisma.host.findMany({
          where: { id: { not: 'gone-1' }, state: { not: 'OFFLINE' } },
        })
      ).map((x) => x.id);
      assert.deepEqual(await letTimePass(others), ['gone-1']);
      const stop = assertOk(
        await h.graphql<{ stopShard: { state: string } }>(
          `mutation ($id: ID!) { stopShard(id: $id) { state } }`,
          { id: stopped.id },
          team.member,
        ),
      );
      assert.equal(stop.stopShard.state, 'STOPPED');
      const reply = await fleet.registerHost(
        registerRequest('gone-1', { gpus: 2, labels: { pool: 'gone' } }),
      );
      const row = await h.prisma.shard.findUniqueOrThrow({ where: { id: vanished.id } });
      assert.equal(row.state, 'FAILED');
      assert.match(row.failureReason ?? '', /gone when its host came back/);
      assert.equal(reply.accepted && reply.desired.length, 0);
      assert.ok(reply.accepted && reply.stoppedShardIds.includes(stopped.id));
      assert.equal(
        (await reservedOn(h, gpuUuidOf('gone-1', 0))) +
          (await reservedOn(h, gpuUuidOf('gone-1', 1))),
        0,
      );
    });

    it('a control plane that just started marks nothing before it has listened for a whole period', async () => {
      const fresh = new HostOfflineSweeper(
        h.controlPlane.app.get(HostLivenessService),
        clock,
        { ...h.controlPlane.config, hostOfflineSeconds: 3600 },
        {
          child: () => ({ error: () => undefined }),
        } as never,
      );
      clock.advance(10_000);
      assert.deepEqual(await fresh.sweep(), []);
    });
  });
}

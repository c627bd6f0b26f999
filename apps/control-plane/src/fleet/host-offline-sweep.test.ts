import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PROTOCOL_VERSION } from '@gpushards/protocol';
import type { ShardStateChange } from '../events/shard-event-bus.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { QueueService } from '../queue/queue.service.js';
import { ShardLifecycle } from '../shards/shard-lifecycle.js';
import { TeamsService } from '../teams/teams.service.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { within } from '../testing/bounded-wait.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import {
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
import { recordStatements } from '../testing/statement-recorder.js';
import { AgentReportsService } from './agent-reports.service.js';
import { ManualClock } from './clock.js';
import { HOSTS_PER_OFFLINE_TRANSACTION, HostLivenessService } from './host-liveness.service.js';
import { HostOfflineSweeper } from './host-offline-sweeper.js';

/** The offline sweep marking many hosts at once, and sweeps that meet heartbeats or each other. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const OFFLINE_SECONDS = 30;
/** More hosts than one transaction marks, so that a sweep takes two. */
const MANY = HOSTS_PER_OFFLINE_TRANSACTION + 20;

const CONTEXT = 512 * MiB; // registerRequest's context overhead, in every cap
const SHARE = `query ($id: ID!) { team(id: $id) { share { held { bytes } } } }`;
const SET_POLICY = `mutation ($teamId: ID!, $input: QuotaPolicyInput!) {
  setQuotaPolicy(teamId: $teamId, input: $input) { id } }`;

/**
 * Each GPU's reserved bytes and guaranteed compute against its open reservations, and its
 * suspended bytes against the caps of the SUSPENDED shards whose latest reservation was there
 * (ShardLifecycle's bookkeeping): the GPUs where they differ, with both sides.
 */
async function bookkeepingErrors(h: ApiTestHarness): Promise<unknown[]> {
  return h.prisma.$queryRaw<unknown[]>`
    SELECT * FROM (
      SELECT gpu.uuid, gpu.reserved_bytes::text AS reserved,
             (SELECT coalesce(sum(r.reserved_bytes), 0) FROM shard_gpu r
               WHERE r.gpu_uuid = gpu.uuid AND r.released_at IS NULL)::text AS "openReserved",
             gpu.guaranteed_compute_permille AS permille,
             (SELECT coalesce(sum(r.compute_share_permille), 0) FROM shard_gpu r
               WHERE r.gpu_uuid = gpu.uuid AND r.released_at IS NULL)::int AS "openPermille",
             gpu.suspended_bytes::text AS suspended,
             (SELECT coalesce(sum(shard.limit_bytes_per_gpu), 0) FROM shard
                JOIN shard_gpu r ON r.shard_id = shard.id
                                AND r.reserved_at = (SELECT max(reserved_at) FROM shard_gpu
                                                      WHERE shard_id = shard.id)
               WHERE shard.state = 'SUSPENDED' AND r.gpu_uuid = gpu.uuid)::text AS "suspendedCaps"
        FROM gpu) AS book
     WHERE reserved <> "openReserved" OR permille <> "openPermille"
        OR suspended <> "suspendedCaps"`;
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`offline sweep of many hosts on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    let liveness: HostLivenessService;
    let sweeper: HostOfflineSweeper;
    let queue: QueueService;
    let team: TestTeam;
    const clock = new ManualClock(new Date('2030-01-01T00:00:00Z'));
    /** Every state change this control plane published. */
    const published: ShardStateChange[] = [];

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: {
          clock,
          shardCommands: new FakeShardCommands(),
          hostOfflineSeconds: OFFLINE_SECONDS,
        },
      });
      fleet = h.controlPlane.app.get(AgentReportsService);
      liveness = h.controlPlane.app.get(HostLivenessService);
      sweeper = h.controlPlane.app.get(HostOfflineSweeper);
      // The tests sweep when they mean to: the sweeper's own timer (every 7.5 s of real time)
      // would otherwise take some of a test's hosts once the manual clock is past their deadline,
      // and the test's sweep would not mark them all, or in the statements counted.
      await sweeper.onModuleDestroy();
      queue = h.controlPlane.app.get(QueueService);
      h.controlPlane.app.get(ShardLifecycle).observe((change) => published.push(change));
      team = await createTestTeam(h, 'sweep-team');
    });
    after(async () => {
      await h?.close();
    });

    /** `count` hosts of one 80 GiB GPU labelled pool=`pool`, each given one 50 GiB shard. */
    async function hostsWithShards(pool: string, count: number) {
      const hostIds = Array.from(
        { length: count },
        (_, i) => `${pool}-${String(i).padStart(3, '0')}`,
      );
      const shards = [];
      // Each host registered right before its shard is created, so that the shard can only go
      // there (the earlier hosts are full).
      for (const [i, id] of hostIds.entries()) {
        await fleet.registerHost(registerRequest(id, { gpus: 1, labels: { pool } }));
        const created = assertOk(
          await createShard(h, team.member, {
            memoryPerGpu: '50g',
            computeSharePercent: 10 + (i % 3) * 10,
            hostSelector: [{ key: 'pool', value: pool }],
          }),
        ).createShard;
        shards.push({ id: created.id, hostId: created.hostId! });
      }
      assert.equal(new Set(shards.map((s) => s.hostId)).size, count, 'one shard per host');
      return { hostIds, shards };
    }

    /** The hosts not OFFLINE outside `pool` heartbeat now, so that only `pool`'s are silent. */
    async function othersHeartbeat(pool: string) {
      const others = await h.prisma.host.findMany({
        where: { id: { not: { startsWith: `${pool}-` } }, state: { not: 'OFFLINE' } },
      });
      for (const { id } of others) await fleet.recordHeartbeat(id, heartbeat(id, clock.now()));
    }

    function deadline(): Date {
      return new Date(clock.now().getTime() - OFFLINE_SECONDS * 1000);
    }

    /** A time after every earlier one, for an agent's event (the clock moves on by 1 ms). */
    function tick(): Date {
      clock.advance(1);
      return clock.now();
    }

    /** The sweep, with the host OFFLINE after it. */
    async function sweepUntilOffline(hostId: string): Promise<void> {
      await sweeper.sweep();
      assert.equal(
        (await h.prisma.host.findUniqueOrThrow({ where: { id: hostId } })).state,
        'OFFLINE',
      );
    }

    /** A one-GPU host labelled pool=<its id> whose agent suspends (100 GiB of host RAM). */
    async function registerSuspending(hostId: string): Promise<void> {
      const request = registerRequest(hostId, { gpus: 1, labels: { pool: hostId } });
      await fleet.registerHost({
        ...request,
        host: { ...request.host, suspendBudgetBytes: 100 * GiB },
      });
    }

    let elasticTeam: TestTeam | undefined;
    /** A team whose quota allows elastic shards. */
    async function elasticTeamOf(): Promise<TestTeam> {
      if (elasticTeam !== undefined) return elasticTeam;
      elasticTeam = await createTestTeam(h, 'elastic-team', null);
      assertOk(
        await h.graphql(SET_POLICY, {
          teamId: elasticTeam.id,
          input: { maxTotal: '1t', maxShards: 100, maxPerShard: '1t', allowElastic: true },
        }),
      );
      return elasticTeam;
    }

    /** A RUNNING 10g shard (a 10 % compute share) of `owner` on `hostId` (pool=<hostId>). */
    async function runningOn(hostId: string, name: string, elastic: boolean, owner: TestTeam) {
      const created = assertOk(
        await createShard(h, owner.member, {
          name,
          memoryPerGpu: '10g',
          computeSharePercent: 10,
          elastic,
          hostSelector: [{ key: 'pool', value: hostId }],
        }),
      ).createShard;
      assert.equal(created.hostId, hostId);
      await fleet.applyShardStateEvent(hostId, stateEvent(hostId, created.id, 'RUNNING', tick()));
      return created.id;
    }

    async function suspendShard(id: string, owner: TestTeam) {
      assertOk(
        await h.graphql(
          `mutation ($id: ID!) { suspendShard(id: $id) { id } }`,
          { id },
          owner.member,
        ),
      );
    }

    /** The agent's SUSPENDED event. */
    function suspendedEvent(hostId: string, id: string) {
      return fleet.applyShardStateEvent(
        hostId,
        stateEvent(hostId, id, 'SUSPENDED', tick(), {
          moved: { bytes: 4 * GiB, seconds: 1, processes: 1 },
        }),
      );
    }

    async function heldBytes(teamId: string): Promise<number> {
      const share = assertOk(
        await h.graphql<{ team: { share: { held: { bytes: string } } } }>(SHARE, { id: teamId }),
      );
      return Number(share.team.share.held.bytes);
    }

    it('many hosts lost at once: each OFFLINE, its shards LOST or STOPPED and released, their events stored and published, the audit as before; a few statements per hundred hosts', async () => {
      const { hostIds, shards } = await hostsWithShards('many', MANY);
      // Every tenth shard was asked to stop: STOPPING when its host is lost.
      const stopping = new Set(shards.filter((_, i) => i % 10 === 0).map((s) => s.id));
      for (const id of stopping) {
        assertOk(
          await h.graphql(`mutation ($id: ID!) { stopShard(id: $id) { id } }`, { id }, team.member),
        );
      }
      const registeredAt = await h.prisma.host.findMany({
        where: { id: { in: hostIds } },
        select: { id: true, lastHeartbeatAt: true },
      });
      clock.advance((OFFLINE_SECONDS + 1) * 1000);
      await othersHeartbeat('many');
      const publishedBefore = published.length;

      const { result: marked, statements } = await recordStatements(h.prisma, () =>
        sweeper.sweep(),
      );

      assert.deepEqual([...marked].sort(), hostIds);
      if (kind === 'postgres') {
        // Each transaction marks its hosts, stores their shards' events and writes the audit
        // in one statement each (one host per transaction took a host's and each shard's).
        const transactions = Math.ceil(MANY / HOSTS_PER_OFFLINE_TRANSACTION);
        const count = (pattern: RegExp) => statements.filter((sql) => pattern.test(sql)).length;
        assert.deepEqual(
          {
            hosts: count(/UPDATE host SET state = 'OFFLINE'/),
            shardEvents: count(/INSERT INTO\s+(?:"public"\.)?"?shard_event/),
            audit: count(/INSERT INTO\s+(?:"public"\.)?"?audit_event/),
          },
          { hosts: transactions, shardEvents: transactions, audit: transactions },
        );
      }
      const hosts = await h.prisma.host.findMany({ where: { id: { in: hostIds } } });
      assert.ok(hosts.every((host) => host.state === 'OFFLINE'));
      const cache = h.controlPlane.app.get(FleetCache);
      assert.ok(
        cache
          .hosts()
          .filter((host) => host.id.startsWith('many-'))
          .every((host) => host.state === 'OFFLINE'),
        'the fleet cache has them OFFLINE',
      );
      const rows = await h.prisma.shard.findMany({
        where: { id: { in: shards.map((s) => s.id) } },
      });
      for (const row of rows) {
        assert.equal(row.state, stopping.has(row.id) ? 'STOPPED' : 'LOST', row.id);
      }
      assert.equal(
        await h.prisma.shardGpu.count({
          where: { shardId: { in: shards.map((s) => s.id) }, releasedAt: null },
        }),
        0,
        'every reservation released',
      );
      const gpus = await h.prisma.gpu.findMany({ where: { hostId: { in: hostIds } } });
      assert.equal(gpus.length, MANY);
      for (const gpu of gpus) {
        assert.equal(gpu.reservedBytes, 0n, gpu.uuid);
        assert.equal(gpu.guaranteedComputePermille, 0, gpu.uuid);
      }
      // One stored event per shard, and the same published with its id.
      const events = await h.prisma.shardEvent.findMany({
        where: { shardId: { in: shards.map((s) => s.id) }, state: { in: ['LOST', 'STOPPED'] } },
      });
      assert.equal(events.length, MANY);
      const sent = published.slice(publishedBefore);
      assert.deepEqual(
        sent.map((change) => `${change.shard.id} ${change.previousState}→${change.state}`).sort(),
        events.map((event) => `${event.shardId} ${event.previousState}→${event.state}`).sort(),
      );
      assert.deepEqual(
        sent.map((change) => change.eventId).sort(),
        events.map((event) => String(event.id)).sort(),
      );
      // The audit: each shard's change and each host's, with the details one host at a time wrote.
      const audits = await h.prisma.auditEvent.findMany({
        where: {
          OR: [
            {
              targetId: { in: shards.map((s) => s.id) },
              action: { in: ['shard.lost', 'shard.stop'] },
              actorTokenId: null,
            },
            { targetId: { in: hostIds }, action: 'host.offline' },
          ],
        },
      });
      assert.equal(audits.length, 2 * MANY);
      for (const shard of shards) {
        const [audit, ...more] = audits.filter((a) => a.targetId === shard.id);
        assert.equal(more.length, 0);
        const to = stopping.has(shard.id) ? 'STOPPED' : 'LOST';
        assert.deepEqual(
          {
            action: audit!.action,
            targetType: audit!.targetType,
            teamId: audit!.teamId,
            actor: audit!.actorTokenId,
            details: audit!.details,
          },
          {
            action: to === 'LOST' ? 'shard.lost' : 'shard.stop',
            targetType: 'Shard',
            teamId: team.id,
            actor: null,
            details: {
              from: stopping.has(shard.id) ? 'STOPPING' : 'PLACED',
              to,
              hostId: shard.hostId,
              reason: 'host offline',
            },
          },
        );
      }
      for (const { id, lastHeartbeatAt } of registeredAt) {
        const [audit, ...more] = audits.filter((a) => a.targetId === id);
        assert.equal(more.length, 0);
        assert.deepEqual(
          { targetType: audit!.targetType, teamId: audit!.teamId, details: audit!.details },
          {
            targetType: 'Host',
            teamId: null,
            details: {
              previousState: 'ONLINE',
              lastHeartbeatAt: lastHeartbeatAt!.toISOString(),
              shards: shards.filter((s) => s.hostId === id).map((s) => s.id),
            },
          },
        );
      }
      assert.deepEqual(await sweeper.sweep(), [], 'marked once');
    });

    it('two sweeps at once mark each host once', async () => {
      const { hostIds, shards } = await hostsWithShards('twice', 30);
      clock.advance((OFFLINE_SECONDS + 1) * 1000);
      await othersHeartbeat('twice');
      const [first, second] = await Promise.all([
        liveness.markSilentHostsOffline(deadline()),
        liveness.markSilentHostsOffline(deadline()),
      ]);
      assert.deepEqual([...first, ...second].sort(), hostIds);
      for (const id of hostIds) {
        assert.equal(
          await h.prisma.auditEvent.count({ where: { action: 'host.offline', targetId: id } }),
          1,
          id,
        );
      }
      assert.equal(
        await h.prisma.shardEvent.count({
          where: { shardId: { in: shards.map((s) => s.id) }, state: 'LOST' },
        }),
        shards.length,
      );
      const gpus = await h.prisma.gpu.findMany({ where: { hostId: { in: hostIds } } });
      assert.ok(
        gpus.every((gpu) => gpu.reservedBytes === 0n && gpu.guaranteedComputePermille === 0),
      );
    });

    // PGlite runs one transaction at a time: a heartbeat cannot commit inside the sweep's.
    if (kind === 'postgres')
      it('a host that heartbeats while the sweep waits for its row is not marked; the others are', async () => {
        const { hostIds, shards } = await hostsWithShards('beat', 3);
        const [beating, ...silent] = hostIds as [string, ...string[]];
        clock.advance((OFFLINE_SECONDS + 1) * 1000);
        await othersHeartbeat('beat');
        // A heartbeat in flight holds the host's row, as touchLiveHosts does.
        let holding!: () => void;
        let release!: () => void;
        const held = new Promise<void>((resolve) => (holding = resolve));
        const released = new Promise<void>((resolve) => (release = resolve));
        const heartbeatWrite = h.prisma.$transaction(async (tx) => {
          await tx.$queryRaw`SELECT id FROM host WHERE id = ${beating} FOR NO KEY UPDATE`;
          holding();
          await released;
          await tx.$executeRaw`
            UPDATE host SET last_heartbeat_at = ${clock.now()} WHERE id = ${beating}`;
        });
        await held;
        // The sweep read the host as silent and waits for its row.
        const sweep = liveness.markSilentHostsOffline(deadline());
        await within(
          (async () => {
            for (;;) {
              const [row] = await h.prisma.$queryRaw<{ waiting: number }[]>`
                SELECT count(*)::int AS waiting FROM pg_locks
                 WHERE NOT granted AND locktype IN ('transactionid', 'tuple')`;
              if (row!.waiting > 0) return;
            }
          })(),
          'the sweep to wait for the row',
        );
        release();
        await heartbeatWrite;
        assert.deepEqual((await sweep).sort(), silent);
        assert.equal(
          (await h.prisma.host.findUniqueOrThrow({ where: { id: beating } })).state,
          'ONLINE',
        );
        const kept = shards.find((s) => s.hostId === beating)!;
        assert.equal(
          (await h.prisma.shard.findUniqueOrThrow({ where: { id: kept.id } })).state,
          'PLACED',
        );
        assert.equal(
          await h.prisma.shardGpu.count({ where: { shardId: kept.id, releasedAt: null } }),
          1,
        );
        assert.equal(
          await h.prisma.auditEvent.count({
            where: {
              targetId: { in: [beating, kept.id] },
              action: { in: ['host.offline', 'shard.lost'] },
            },
          }),
          0,
        );
      });

    it('a host lost with suspending, suspended and resuming shards: each LOST, what each held released exactly; back, each settled by where its memory is', async () => {
      const hostId = 'elastic-0';
      await registerSuspending(hostId);
      const elasticTeam = await elasticTeamOf();
      const running = (name: string, elastic: boolean) =>
        runningOn(hostId, name, elastic, elasticTeam);
      const suspend = (id: string) => suspendShard(id, elasticTeam);
      const suspended = (id: string) => suspendedEvent(hostId, id);
      const suspending = await running('suspending', true);
      await suspend(suspending);
      const asleep = await running('suspended', true);
      await suspend(asleep);
      await suspended(asleep);
      const resuming = await running('resuming', true);
      await suspend(resuming);
      await suspended(resuming);
      assertOk(
        await h.graphql(
          `mutation ($id: ID!) { resumeShard(id: $id) { id } }`,
          { id: resuming },
          elasticTeam.member,
        ),
      );
      await queue.admitNow();
      const plain = await running('plain', false);
      const ids = [suspending, asleep, resuming, plain];
      const stateOf = async () =>
        Object.fromEntries(
          (await h.prisma.shard.findMany({ where: { id: { in: ids } } })).map((row) => [
            row.id,
            row.state,
          ]),
        );
      assert.deepEqual(await stateOf(), {
        [suspending]: 'SUSPENDING',
        [asleep]: 'SUSPENDED',
        [resuming]: 'RESUMING',
        [plain]: 'RUNNING',
      });
      const cap = 10 * GiB + CONTEXT;
      const gpuOf = () => h.prisma.gpu.findFirstOrThrow({ where: { hostId } });
      const before = await gpuOf();
      assert.deepEqual(
        [before.reservedBytes, before.suspendedBytes, before.guaranteedComputePermille],
        [BigInt(3 * cap), BigInt(cap), 300],
      );
      assert.deepEqual(await bookkeepingErrors(h), []);
      assert.equal(await heldBytes(elasticTeam.id), 3 * 10 * GiB);
      const teams = h.controlPlane.app.get(TeamsService);
      const quotaUsage = await teams.usage(elasticTeam.id);
      assert.equal(quotaUsage.shardCount, 4);

      clock.advance((OFFLINE_SECONDS + 1) * 1000);
      await othersHeartbeat('elastic');
      await sweepUntilOffline(hostId);

      assert.deepEqual(await stateOf(), Object.fromEntries(ids.map((id) => [id, 'LOST'])));
      const lost = await gpuOf();
      assert.deepEqual(
        [lost.reservedBytes, lost.suspendedBytes, lost.guaranteedComputePermille],
        [0n, 0n, 0],
        'reservations and the suspended cap released',
      );
      assert.deepEqual(await bookkeepingErrors(h), []);
      assert.equal(
        await h.prisma.shardGpu.count({ where: { shardId: { in: ids }, releasedAt: null } }),
        0,
      );
      assert.equal(
        await h.prisma.shardSuspension.count({ where: { shardId: { in: ids }, resumedAt: null } }),
        0,
        'no stay in host RAM open: the host is gone',
      );
      // No longer held on a GPU; still the team's (a lost shard may come back with its host).
      assert.equal(await heldBytes(elasticTeam.id), 0);
      assert.deepEqual(await teams.usage(elasticTeam.id), quotaUsage);
      const audits = await h.prisma.auditEvent.findMany({
        where: { targetId: { in: ids }, action: 'shard.lost' },
      });
      assert.deepEqual(
        Object.fromEntries(audits.map((a) => [a.targetId, (a.details as { from: string }).from])),
        {
          [suspending]: 'SUSPENDING',
          [asleep]: 'SUSPENDED',
          [resuming]: 'RESUMING',
          [plain]: 'RUNNING',
        },
      );

      // The host back: its agent finds the suspend half done, the suspended shard still in host
      // RAM, the resume finished, and the plain shard's container gone.
      const container = (shardId: string, memory: 'resident' | 'suspended' | 'partial') => ({
        shardId,
        containerId: `c-${shardId}`,
        running: true,
        status: 'running' as const,
        memory,
      });
      const reply = await fleet.reconcile(hostId, {
        protocolVersion: PROTOCOL_VERSION,
        hostId,
        observedAt: tick().toISOString(),
        containers: [
          container(suspending, 'partial'),
          container(asleep, 'suspended'),
          container(resuming, 'resident'),
        ],
      });
      // Half moved, it is SUSPENDING with its reservation taken again until the agent has
      // finished the suspend (lostShardReturn): nothing else may be placed in what it still
      // has on the GPU.
      assert.deepEqual(await stateOf(), {
        [suspending]: 'SUSPENDING',
        [asleep]: 'SUSPENDED',
        [resuming]: 'RUNNING',
        [plain]: 'FAILED',
      });
      assert.deepEqual([...(reply.suspendedShardIds ?? [])].sort(), [suspending, asleep].sort());
      assert.deepEqual(
        reply.desired.map((spec) => spec.shardId),
        [resuming],
      );
      const halfway = await gpuOf();
      assert.deepEqual(
        [halfway.reservedBytes, halfway.suspendedBytes, halfway.guaranteedComputePermille],
        [BigInt(2 * cap), BigInt(cap), 200],
      );
      assert.deepEqual(await bookkeepingErrors(h), []);
      assert.equal(await heldBytes(elasticTeam.id), 20 * GiB);
      await suspended(suspending);
      const back = await gpuOf();
      assert.deepEqual(
        [back.reservedBytes, back.suspendedBytes, back.guaranteedComputePermille],
        [BigInt(cap), BigInt(2 * cap), 100],
      );
      assert.deepEqual(await bookkeepingErrors(h), []);
      assert.deepEqual(
        (
          await h.prisma.shardSuspension.findMany({
            where: { shardId: { in: ids }, resumedAt: null },
          })
        )
          .map((stay) => stay.shardId)
          .sort(),
        [suspending, asleep].sort(),
      );
      assert.equal(await heldBytes(elasticTeam.id), 10 * GiB);
      assert.equal((await teams.usage(elasticTeam.id)).shardCount, 3);
    });

    it('a host lost with a reclaimed shard stopping to be requeued: PENDING, and its audit says so', async () => {
      const hostId = 'requeue-0';
      await fleet.registerHost(
        registerRequest(hostId, { gpus: 1, model: 'QGPU-L 80GB', labels: { pool: 'requeue' } }),
      );
      const owner = await createTestTeam(h, 'requeue-owner', null);
      assertOk(
        await h.graphql(SET_POLICY, {
          teamId: owner.id,
          input: {
            maxTotal: '80g',
            maxShards: 10,
            maxPerShard: '80g',
            guarantee: '40g',
            guaranteeGpuModel: 'QGPU-L',
          },
        }),
      );
      const inPool = { queue: true, hostSelector: [{ key: 'pool', value: 'requeue' }] };
      const borrowed = assertOk(
        await createShard(h, team.member, { ...inPool, name: 'borrowed', memoryPerGpu: '70g' }),
      ).createShard;
      await queue.admitNow();
      await fleet.applyShardStateEvent(hostId, stateEvent(hostId, borrowed.id, 'RUNNING', tick()));
      assertOk(
        await createShard(h, owner.member, { ...inPool, name: 'mine', memoryPerGpu: '40g' }),
      );
      await queue.admitNow();
      const victim = await h.prisma.shard.findUniqueOrThrow({ where: { id: borrowed.id } });
      assert.deepEqual([victim.state, victim.stopIntent], ['STOPPING', 'requeue']);

      clock.advance((OFFLINE_SECONDS + 1) * 1000);
      await othersHeartbeat('requeue');
      await sweepUntilOffline(hostId);

      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: borrowed.id } })).state,
        'PENDING',
      );
      assert.equal(
        await h.prisma.shardGpu.count({ where: { shardId: borrowed.id, releasedAt: null } }),
        0,
      );
      const [audit, ...more] = await h.prisma.auditEvent.findMany({
        where: { targetId: borrowed.id, action: { in: ['shard.lost', 'shard.stop'] } },
      });
      assert.equal(more.length, 0);
      assert.deepEqual(audit!.details, {
        from: 'STOPPING',
        to: 'PENDING',
        hostId,
        reason: 'host offline',
      });
    });

    it('a shard lost while SUSPENDED comes back SUSPENDED whichever message brings its host back: a register, a heartbeat', async () => {
      const hostId = 'asleep-0';
      await registerSuspending(hostId);
      const owner = await elasticTeamOf();
      const id = await runningOn(hostId, 'asleep', true, owner);
      await suspendShard(id, owner);
      await suspendedEvent(hostId, id);
      const cap = BigInt(10 * GiB + CONTEXT);
      const lose = async () => {
        clock.advance((OFFLINE_SECONDS + 1) * 1000);
        await othersHeartbeat('asleep');
        await sweepUntilOffline(hostId);
        const shard = await h.prisma.shard.findUniqueOrThrow({ where: { id } });
        const gpu = await h.prisma.gpu.findFirstOrThrow({ where: { hostId } });
        assert.deepEqual([shard.state, gpu.suspendedBytes], ['LOST', 0n]);
      };
      const settled = async (how: string) => {
        const shard = await h.prisma.shard.findUniqueOrThrow({ where: { id } });
        const gpu = await h.prisma.gpu.findFirstOrThrow({ where: { hostId } });
        assert.deepEqual(
          [shard.state, gpu.reservedBytes, gpu.suspendedBytes],
          ['SUSPENDED', 0n, cap],
          how,
        );
        assert.deepEqual(await bookkeepingErrors(h), [], how);
        assert.equal(
          await h.prisma.shardSuspension.count({ where: { shardId: id, resumedAt: null } }),
          1,
          how,
        );
      };

      await lose();
      const request = registerRequest(hostId, {
        gpus: 1,
        labels: { pool: hostId },
        runningShards: [
          { shardId: id, containerId: 'c-asleep', state: 'RUNNING', memory: 'suspended' },
        ],
      });
      const reply = await fleet.registerHost({
        ...request,
        host: { ...request.host, suspendBudgetBytes: 100 * GiB },
      });
      assert.deepEqual(reply.accepted && reply.suspendedShardIds, [id]);
      await settled('back by a register');

      await lose();
      await fleet.recordHeartbeat(
        hostId,
        heartbeat(hostId, clock.now(), [{ shardId: id, usedBytesPerGpu: [], memory: 'suspended' }]),
      );
      await settled('back by a heartbeat');
    });
  });
}

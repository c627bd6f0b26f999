import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ShardStateChange } from '../events/shard-event-bus.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { ShardLifecycle } from '../shards/shard-lifecycle.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { within } from '../testing/bounded-wait.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import {
  assertOk,
  createShard,
  createTestTeam,
  heartbeat,
  registerRequest,
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

for (const kind of TEST_DATABASE_KINDS) {
  describe(`offline sweep of many hosts on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    let liveness: HostLivenessService;
    let sweeper: HostOfflineSweeper;
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
  });
}

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PROTOCOL_VERSION, type ReconcileRequest } from '@gpushards/protocol';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { ShardEventBus, type ShardStateChange } from '../events/shard-event-bus.js';
import { ManualClock } from '../fleet/clock.js';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
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
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { CapPolicies } from './cap-policies.js';
import { FenceService } from './fence.service.js';

/** The host fence in the API: cap policies, real usage beside charged, memory of no shard, violations. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const SET_POLICY = `mutation ($teamId: ID!, $policy: CapPolicy) {
  setTeamCapPolicy(teamId: $teamId, policy: $policy) { id capPolicy effectiveCapPolicy }
}`;
const SHARD_GPUS = `query ($id: ID!) {
  shard(id: $id) { gpus { gpuUuid used { bytes } real { bytes } busyRatio lastKernelAt } }
}`;
const HOST = `query ($id: ID!) {
  host(id: $id) { memory { unattributed { bytes } } gpus { uuid unattributed { bytes } } }
}`;

for (const kind of TEST_DATABASE_KINDS) {
  describe(`host fence in the API on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    let fence: FenceService;
    let team: TestTeam;
    const clock = new ManualClock(new Date('2030-01-01T00:00:00Z'));
    const commands = new FakeShardCommands();

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { clock, shardCommands: commands },
      });
      fleet = h.controlPlane.app.get(AgentReportsService);
      fence = h.controlPlane.app.get(FenceService);
      team = await createTestTeam(h, 'fence-team');
    });
    after(async () => {
      await h?.close();
    });

    it('cap policy: the fleet default, an admin override per team (validated), carried by launches', async () => {
      const read = async () =>
        assertOk(
          await h.graphql<{ team: { capPolicy: string | null; effectiveCapPolicy: string } }>(
            `query ($id: ID!) { team(id: $id) { capPolicy effectiveCapPolicy } }`,
            { id: team.id },
            team.viewer,
          ),
        ).team;
      assert.deepEqual(await read(), { capPolicy: null, effectiveCapPolicy: 'KILL' });
      assertError(
        await h.graphql(SET_POLICY, { teamId: team.id, policy: 'REPORT' }, team.member),
        'FORBIDDEN',
      );
      assertError(
        await h.graphql(SET_POLICY, { teamId: team.id, policy: 'NUKE' }),
        'BAD_USER_INPUT',
      );
      assertError(
        await h.graphql(SET_POLICY, {
          teamId: '00000000-0000-4000-8000-000000000000',
          policy: 'STOP',
        }),
        'NOT_FOUND',
      );
      assertOk(await h.graphql(SET_POLICY, { teamId: team.id, policy: 'REPORT' }));
      assert.deepEqual(await read(), { capPolicy: 'REPORT', effectiveCapPolicy: 'REPORT' });
      // What another replica would read after its refresh.
      await h.controlPlane.app.get(CapPolicies).refresh();
      assert.equal(h.controlPlane.app.get(CapPolicies).effective(team.id), 'REPORT');

      await fleet.registerHost(registerRequest('fence-1', { gpus: 2, labels: { pool: 'fence' } }));
      const shard = assertOk(
        await createShard(h, team.member, {
          memoryPerGpu: '8g',
          gpuCount: 2,
          hostSelector: [{ key: 'pool', value: 'fence' }],
        }),
      ).createShard;
      const launch = commands.forShard(shard.id).find((command) => command.type === 'launch');
      assert.ok(launch?.type === 'launch');
      assert.equal(launch.spec.capPolicy, 'report', 'the launch carries the team policy');

      assertOk(await h.graphql(SET_POLICY, { teamId: team.id, policy: null }));
      assert.deepEqual(await read(), { capPolicy: null, effectiveCapPolicy: 'KILL' });
    });

    it("a team's new cap policy reaches its running shards at once: their hosts reconcile, and any replica's reply carries it", async () => {
      await fleet.registerHost(
        registerRequest('fence-3', { gpus: 1, labels: { pool: 'fence-3' } }),
      );
      const shard = assertOk(
        await createShard(h, team.member, {
          memoryPerGpu: '4g',
          hostSelector: [{ key: 'pool', value: 'fence-3' }],
        }),
      ).createShard;
      const reconcile: ReconcileRequest = {
        protocolVersion: PROTOCOL_VERSION,
        hostId: 'fence-3',
        containers: [{ shardId: shard.id, containerId: 'c-fence-3', running: true }],
      };
      await fleet.reconcile('fence-3', reconcile);
      assert.equal(
        (await h.prisma.shard.findUniqueOrThrow({ where: { id: shard.id } })).state,
        'RUNNING',
      );
      const before = commands.recorded.length;
      assertOk(await h.graphql(SET_POLICY, { teamId: team.id, policy: 'STOP' }));
      assert.deepEqual(
        commands.recorded.slice(before).filter((command) => command.type === 'reconcile'),
        [{ type: 'reconcile', hostId: 'fence-3' }],
        "the host running the team's shard is told to reconcile now",
      );
      // Answered by a replica that has not refreshed its cache yet: the reply (what
      // AgentMessagesService sends back for a register or reconcile) reads the team.
      const policies = h.controlPlane.app.get(CapPolicies);
      policies.noteOverride(team.id, null);
      const reply = await fleet.reconcile('fence-3', reconcile);
      const desired = await policies.withCurrentPolicies(reply.desired);
      assert.deepEqual(
        desired.map((spec) => [spec.shardId, spec.capPolicy]),
        [[shard.id, 'stop']],
      );
      assert.equal(policies.effective(team.id), 'STOP', 'the cache is brought up to date');

      assertOk(await h.graphql(SET_POLICY, { teamId: team.id, policy: null }));
    });

    it('heartbeats: real beside charged per GPU of a shard, memory of no shard per host; a violation is a shard event and a metric', async () => {
      await fleet.registerHost(
        registerRequest('fence-2', { gpus: 2, labels: { pool: 'fence-2' } }),
      );
      const shard = assertOk(
        await createShard(h, team.member, {
          memoryPerGpu: '8g',
          gpuCount: 2,
          hostSelector: [{ key: 'pool', value: 'fence-2' }],
        }),
      ).createShard;
      const [gpu0, gpu1] = [gpuUuidOf('fence-2', 0), gpuUuidOf('fence-2', 1)];
      const events: ShardStateChange[] = [];
      const subscription = h.controlPlane.app
        .get(ShardEventBus)
        .subscribe((event) => event.shard.id === shard.id);
      const message = {
        ...heartbeat(
          'fence-2',
          clock.now(),
          [
            {
              shardId: shard.id,
              usedBytesPerGpu: [
                { gpuUuid: gpu0, usedBytes: 2 * GiB },
                { gpuUuid: gpu1, usedBytes: 3 * GiB },
              ],
              realBytesPerGpu: [
                { gpuUuid: gpu0, realBytes: 2 * GiB + 100 * MiB },
                { gpuUuid: gpu1, realBytes: 12 * GiB },
              ],
              // Compute activity from the host's ledger (docs/compute.md).
              activityPerGpu: [
                { gpuUuid: gpu0, busyRatio: 0.25, lastKernelSeconds: 2 },
                { gpuUuid: gpu1, busyRatio: 0.75 },
              ],
            },
          ],
          [
            { uuid: gpu0, usedBytes: 3 * GiB },
            { uuid: gpu1, usedBytes: 13 * GiB },
          ],
        ),
        unattributedBytesPerGpu: [{ gpuUuid: gpu1, bytes: 700 * MiB }],
        violations: [
          {
            shardId: shard.id,
            gpuUuid: gpu1,
            realBytes: 12 * GiB,
            capBytes: 8 * GiB + 512 * MiB,
            toleranceBytes: 160 * MiB,
            action: 'kill' as const,
            pid: 4242,
            processBytes: 9 * GiB,
            killedPids: [4242],
            at: clock.now().toISOString(),
          },
          // Another host's agent cannot report on this shard.
          {
            shardId: '00000000-0000-4000-8000-000000000001',
            gpuUuid: gpu1,
            realBytes: 1,
            capBytes: 0,
            toleranceBytes: 0,
            action: 'report' as const,
            pid: 1,
            processBytes: 1,
            killedPids: [],
            at: clock.now().toISOString(),
          },
        ],
      };
      assert.equal((await fleet.recordHeartbeat('fence-2', message)).known, true);
      await fence.recordFindings('fence-2', message);

      const next = await subscription.next();
      assert.equal(next.done, false);
      events.push(next.value as ShardStateChange);
      await subscription.return?.();
      assert.equal(events[0]!.violation?.action, 'KILL');
      assert.equal(events[0]!.violation?.real.bytes, 12 * GiB);
      assert.deepEqual(events[0]!.violation?.killedPids, [4242]);
      assert.equal(events[0]!.state, events[0]!.previousState, 'a violation is no state change');

      const gpus = assertOk(
        await h.graphql<{
          shard: {
            gpus: {
              gpuUuid: string;
              used: { bytes: string };
              real: { bytes: string } | null;
              busyRatio: number | null;
              lastKernelAt: string | null;
            }[];
          };
        }>(SHARD_GPUS, { id: shard.id }, team.viewer),
      ).shard.gpus;
      assert.deepEqual(
        gpus.map((g) => [g.gpuUuid, g.used.bytes, g.real?.bytes]),
        [
          [gpu0, String(2 * GiB), String(2 * GiB + 100 * MiB)],
          [gpu1, String(3 * GiB), String(12 * GiB)],
        ],
      );
      // The heartbeat's activity: last kernel 2 s before it was sent, none on GPU 1.
      assert.deepEqual(
        gpus.map((g) => [g.busyRatio, g.lastKernelAt]),
        [
          [0.25, new Date(clock.now().getTime() - 2000).toISOString()],
          [0.75, null],
        ],
      );
      const host = assertOk(
        await h.graphql<{
          host: {
            memory: { unattributed: { bytes: string } };
            gpus: { uuid: string; unattributed: { bytes: string } }[];
          };
        }>(HOST, { id: 'fence-2' }),
      ).host;
      assert.equal(host.memory.unattributed.bytes, String(700 * MiB));
      assert.deepEqual(
        host.gpus.map((g) => [g.uuid, g.unattributed.bytes]),
        [
          [gpu0, '0'],
          [gpu1, String(700 * MiB)],
        ],
      );

      const metrics = await (await fetch(`${h.controlPlane.url}/metrics`)).text();
      assert.match(
        metrics,
        /gpushards_cap_violations_total\{action="kill",team="fence-team"\} 1\n/,
      );
      assert.match(
        metrics,
        new RegExp(
          `gpushards_shard_real_bytes\\{shard="${shard.id}",team="fence-team",host="fence-2"\\} ${14 * GiB + 100 * MiB}\\n`,
        ),
      );
      const activity = `shard="${shard.id}",team="fence-team",host="fence-2"`;
      assert.match(
        metrics,
        new RegExp(`gpushards_shard_gpu_busy_ratio\\{${activity},gpu="${gpu0}"\\} 0.25\n`),
      );
      assert.match(
        metrics,
        new RegExp(`gpushards_shard_gpu_busy_ratio\\{${activity},gpu="${gpu1}"\\} 0.75\n`),
      );
      assert.match(
        metrics,
        new RegExp(
          `gpushards_shard_last_kernel_seconds\\{${activity},gpu="${gpu0}"\\} [0-9.e+-]+\n`,
        ),
      );
      assert.doesNotMatch(
        metrics,
        new RegExp(`gpushards_shard_last_kernel_seconds\\{${activity},gpu="${gpu1}"\\}`),
        'no launch reported on GPU 1: no series',
      );
      assert.match(
        metrics,
        /gpushards_gpu_unattributed_bytes\{host="fence-2",gpu="GPU-fence-2-1"[^}]*\} 734003200\n/,
      );
    });

    it("a batch of several hosts' heartbeats writes each host's readings (another host's shard or GPU ignored); an unchanged reading writes no row version", async () => {
      for (const id of ['fence-b1', 'fence-b2']) {
        await fleet.registerHost(registerRequest(id, { gpus: 1, labels: { pool: id } }));
      }
      const place = async (pool: string) =>
        assertOk(
          await createShard(h, team.member, {
            memoryPerGpu: '4g',
            hostSelector: [{ key: 'pool', value: pool }],
          }),
        ).createShard.id;
      const [one, two] = [await place('fence-b1'), await place('fence-b2')];
      const [gpu1, gpu2] = [gpuUuidOf('fence-b1', 0), gpuUuidOf('fence-b2', 0)];
      const t0 = clock.now().getTime();
      const reading = (
        shardId: string,
        gpuUuid: string,
        real: number,
        busyRatio: number,
        lastKernelSeconds: number,
      ) => ({
        shardId,
        usedBytesPerGpu: [{ gpuUuid, usedBytes: GiB }],
        realBytesPerGpu: [{ gpuUuid, realBytes: real }],
        activityPerGpu: [{ gpuUuid, busyRatio, lastKernelSeconds }],
      });
      /** fence-b1 at t0 + `after` seconds, its last kernel at t0 − 1 s, and fence-b2's beat. */
      const batch = (after: number, busy: number) => [
        {
          hostId: 'fence-b1',
          heartbeat: {
            ...heartbeat(
              'fence-b1',
              new Date(t0 + after * 1000),
              [
                reading(one, gpu1, 2 * GiB, busy, after + 1),
                // fence-b2's shard: not fence-b1's to report.
                reading(two, gpu2, 9 * GiB, 1, 0),
              ],
              [
                { uuid: gpu1, usedBytes: 3 * GiB },
                { uuid: gpu2, usedBytes: 9 * GiB },
              ],
            ),
            // gpu2 is fence-b2's: ignored.
            unattributedBytesPerGpu: [
              { gpuUuid: gpu1, bytes: 100 * MiB },
              { gpuUuid: gpu2, bytes: 900 * MiB },
            ],
          },
        },
        {
          hostId: 'fence-b2',
          heartbeat: heartbeat(
            'fence-b2',
            new Date(t0 + after * 1000),
            [
              {
                shardId: two,
                usedBytesPerGpu: [{ gpuUuid: gpu2, usedBytes: GiB }],
                realBytesPerGpu: [{ gpuUuid: gpu2, realBytes: 3 * GiB }],
                activityPerGpu: [{ gpuUuid: gpu2, busyRatio: 0.5 }],
              },
            ],
            [{ uuid: gpu2, usedBytes: 4 * GiB }],
          ),
        },
      ];
      const readings = () =>
        h.prisma.$queryRaw<
          {
            shardId: string;
            real: bigint | null;
            busy: number | null;
            lastKernelAt: Date | null;
            version: string;
          }[]
        >`SELECT shard_id::text AS "shardId", real_bytes AS real, busy_ratio AS busy,
                 last_kernel_at AS "lastKernelAt", xmin::text AS version
            FROM shard_gpu WHERE shard_id IN (${one}::uuid, ${two}::uuid) AND released_at IS NULL
           ORDER BY gpu_uuid`;
      const gpus = () =>
        h.prisma.$queryRaw<
          { uuid: string; used: bigint; unattributed: bigint; version: string }[]
        >`SELECT uuid, used_bytes AS used, unattributed_bytes AS unattributed, xmin::text AS version
            FROM gpu WHERE uuid IN (${gpu1}, ${gpu2}) ORDER BY uuid`;

      assert.deepEqual(
        (await fleet.recordHeartbeats(batch(0, 0.25))).map((outcome) => outcome.known),
        [true, true],
      );
      const first = await readings();
      assert.deepEqual(
        first.map((row) => [row.shardId, row.real, row.busy, row.lastKernelAt?.getTime()]),
        [
          [one, BigInt(2 * GiB), 0.25, t0 - 1000],
          [two, BigInt(3 * GiB), 0.5, undefined],
        ],
      );
      const firstGpus = await gpus();
      assert.deepEqual(
        firstGpus.map((row) => [row.uuid, row.used, row.unattributed]),
        [
          [gpu1, BigInt(3 * GiB), BigInt(100 * MiB)],
          [gpu2, BigInt(4 * GiB), 0n],
        ],
      );

      // Ten seconds on, the same readings (the same last kernel, seen ten seconds longer ago):
      // no shard_gpu or gpu row is written again.
      await fleet.recordHeartbeats(batch(10, 0.25));
      assert.deepEqual(await readings(), first, 'unchanged readings: the same row versions');
      assert.deepEqual(await gpus(), firstGpus, 'unchanged GPUs: the same row versions');

      // A new busy ratio on fence-b1 writes its shard's row, and only that one.
      await fleet.recordHeartbeats(batch(20, 0.75));
      const third = await readings();
      assert.equal(third[0]!.busy, 0.75);
      assert.notEqual(third[0]!.version, first[0]!.version);
      assert.deepEqual(third[1], first[1]);
    });

    it('a GPU another transaction holds: its new used bytes wait for the next heartbeat, its new unattributed bytes (placement counts them) for the lock', async (t) => {
      if (kind !== 'postgres') {
        t.skip('PGlite has one connection: no transaction can hold a row meanwhile');
        return;
      }
      await fleet.registerHost(registerRequest('fence-lock', { gpus: 1 }));
      const gpu = gpuUuidOf('fence-lock', 0);
      const beat = (usedBytes: number, unattributed: number) => ({
        ...heartbeat('fence-lock', clock.now(), [], [{ uuid: gpu, usedBytes }]),
        unattributedBytesPerGpu: [{ gpuUuid: gpu, bytes: unattributed }],
      });
      let recorded: Promise<unknown> | undefined;
      let done = false;
      await h.prisma.$transaction(async (tx) => {
        await tx.$queryRaw`SELECT uuid FROM gpu WHERE uuid = ${gpu} FOR UPDATE`;
        recorded = fleet
          .recordHeartbeat('fence-lock', beat(5 * GiB, 300 * MiB))
          .finally(() => (done = true));
        // Until the heartbeat's write waits for this transaction's row lock (or, wrongly, ends).
        while (!done) {
          const [waiting] = await h.prisma.$queryRaw<{ n: number }[]>`
            SELECT count(*)::int AS n FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND query LIKE '%unattributed_bytes = reported.unattributed%'`;
          if (waiting!.n > 0) break;
          await new Promise((resolve) => setImmediate(resolve));
        }
      });
      await recorded;
      const row = await h.prisma.gpu.findUniqueOrThrow({ where: { uuid: gpu } });
      assert.equal(row.unattributedBytes, BigInt(300 * MiB));
      assert.equal(row.usedBytes, 0n, 'used bytes skipped: the next heartbeat writes them');
      await fleet.recordHeartbeat('fence-lock', beat(5 * GiB, 300 * MiB));
      assert.equal(
        (await h.prisma.gpu.findUniqueOrThrow({ where: { uuid: gpu } })).usedBytes,
        BigInt(5 * GiB),
      );
    });
  });
}

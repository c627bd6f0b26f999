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
      await fence.recordHeartbeat('fence-2', message);

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
  });
}

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ShardEventBus, type ShardStateChange } from '../events/shard-event-bus.js';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  gpuUuidOf,
  heartbeat,
  registerRequest,
  stateEvent,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { IdleSweeper } from './idle-sweeper.js';

/** A team's idle policy: reported, then stopped, with events before and at the action. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const SET_IDLE = `mutation ($teamId: ID!, $idle: Int, $stop: Int) {
  setTeamIdlePolicy(teamId: $teamId, idleAfterSeconds: $idle, stopAfterSeconds: $stop) {
    id idlePolicy { idleAfterSeconds stopAfterSeconds }
  }
}`;
const IDLE_SHARDS = `{ shards(idle: true) { edges { node { id idleSince } } } }`;
const HOST = 'idle-1';

for (const kind of TEST_DATABASE_KINDS) {
  describe(`idle policy on ${kind}`, () => {
    let h: ApiTestHarness;
    let team: TestTeam;
    let sweeper: IdleSweeper;
    const commands = new FakeShardCommands();
    const t0 = Date.parse('2030-01-01T00:00:00Z');

    /** A RUNNING shard on the idle host, started at t0. */
    const running = async (name: string): Promise<string> => {
      const shard = assertOk(
        await createShard(h, team.member, {
          name,
          memoryPerGpu: '2g',
          hostSelector: [{ key: 'pool', value: 'idle' }],
        }),
      ).createShard;
      await h.controlPlane.app
        .get(AgentReportsService)
        .applyShardStateEvent(
          HOST,
          stateEvent(HOST, shard.id, 'RUNNING', new Date(t0), { containerId: `c-${name}` }),
        );
      await h.prisma.shard.update({ where: { id: shard.id }, data: { startedAt: new Date(t0) } });
      return shard.id;
    };
    /** What the host's agent reports from its ledger at `at`: the last kernel `ago` seconds before. */
    const activity = async (shardId: string, at: number, ago?: number): Promise<void> => {
      const message = heartbeat(HOST, new Date(at), [
        {
          shardId,
          usedBytesPerGpu: [],
          activityPerGpu: [
            {
              gpuUuid: gpuUuidOf(HOST, 0),
              busyRatio: 0,
              ...(ago === undefined ? {} : { lastKernelSeconds: ago }),
            },
          ],
        },
      ]);
      await h.controlPlane.app.get(AgentReportsService).recordHeartbeat(HOST, message);
    };
    const idleListed = async (): Promise<string[]> =>
      assertOk(
        await h.graphql<{ shards: { edges: { node: { id: string } }[] } }>(
          IDLE_SHARDS,
          {},
          team.viewer,
        ),
      ).shards.edges.map((e) => e.node.id);

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { shardCommands: commands },
      });
      await h.controlPlane.app
        .get(AgentReportsService)
        .registerHost(registerRequest(HOST, { gpus: 1, labels: { pool: 'idle' } }));
      team = await createTestTeam(h, 'idle-team');
      sweeper = h.controlPlane.app.get(IdleSweeper);
    });
    after(async () => {
      await h?.close();
    });

    it('admins set it, checked; the team reads it', async () => {
      for (const [idle, stop, code] of [
        [59, null, 'BAD_USER_INPUT'],
        [600, 599, 'BAD_USER_INPUT'],
        [null, 600, 'BAD_USER_INPUT'],
      ] as const) {
        assertError(await h.graphql(SET_IDLE, { teamId: team.id, idle, stop }), code);
      }
      assertError(
        await h.graphql(SET_IDLE, { teamId: team.id, idle: 60, stop: 120 }, team.member),
        'FORBIDDEN',
      );
      assertOk(await h.graphql(SET_IDLE, { teamId: team.id, idle: 60, stop: 120 }));
      const read = assertOk(
        await h.graphql<{ team: { idlePolicy: unknown } }>(
          `query ($id: ID!) { team(id: $id) { idlePolicy { idleAfterSeconds stopAfterSeconds } } }`,
          { id: team.id },
          team.viewer,
        ),
      );
      assert.deepEqual(read.team.idlePolicy, { idleAfterSeconds: 60, stopAfterSeconds: 120 });
    });

    it('no kernel for idleAfterSeconds: reported (event, listed); then stopped at stopAfterSeconds with an event at the action', async () => {
      const idle = await running('idle');
      const unobserved = await running('no-ledger');
      await activity(idle, t0 + 10_000, 0); // last kernel at t0 + 10 s
      const events: ShardStateChange[] = [];
      const subscription = h.controlPlane.app
        .get(ShardEventBus)
        .subscribe((event) => event.shard.id === idle || event.shard.id === unobserved);

      assert.deepEqual(await sweeper.sweep(t0 + 69_000), [], 'under a minute idle');
      const reported = await sweeper.sweep(t0 + 71_000);
      assert.deepEqual(
        reported.map((a) => [a.kind, a.shardId]),
        [['report', idle]],
        'the shard whose host reports no activity is never judged',
      );
      events.push((await subscription.next()).value as ShardStateChange);
      assert.equal(events[0]!.idle?.action, 'REPORT');
      assert.equal(events[0]!.idle?.idleSince.getTime(), t0 + 10_000);
      assert.equal(events[0]!.state, 'RUNNING');
      assert.deepEqual(await idleListed(), [idle]);
      assert.deepEqual(await sweeper.sweep(t0 + 72_000), [], 'reported once');
      assert.equal(commands.forShard(idle).filter((c) => c.type === 'stop').length, 0);

      const stopped = await sweeper.sweep(t0 + 131_000);
      assert.deepEqual(
        stopped.map((a) => [a.kind, a.shardId]),
        [['stop', idle]],
      );
      events.push((await subscription.next()).value as ShardStateChange);
      events.push((await subscription.next()).value as ShardStateChange);
      await subscription.return?.();
      assert.equal(events[1]!.idle?.action, 'STOP');
      assert.equal(events[1]!.state, 'STOPPING');
      assert.equal(events[2]!.idle, undefined, 'then the state change itself');
      assert.equal(events[2]!.state, 'STOPPING');
      assert.equal(commands.forShard(idle).filter((c) => c.type === 'stop').length, 1);
      const row = await h.prisma.shard.findUniqueOrThrow({ where: { id: idle } });
      assert.match(row.failureReason ?? '', /idle policy/);
      const audits = await h.prisma.auditEvent.findMany({
        where: { targetId: idle, action: { startsWith: 'shard.idle' } },
        orderBy: { at: 'asc' },
      });
      assert.deepEqual(
        audits.map((a) => a.action),
        ['shard.idle', 'shard.idle-stop'],
      );
      assert.deepEqual(await idleListed(), [], 'only RUNNING shards are listed idle');
    });

    it('a kernel after the report clears it, and nothing is stopped', async () => {
      const busy = await running('busy');
      await activity(busy, t0 + 1_000, 1); // last kernel at t0
      assert.deepEqual(
        (await sweeper.sweep(t0 + 61_000)).map((a) => a.kind),
        ['report'],
      );
      assert.deepEqual(await idleListed(), [busy]);
      await activity(busy, t0 + 100_000, 0);
      assert.deepEqual(
        (await sweeper.sweep(t0 + 125_000)).map((a) => a.kind),
        ['clear'],
      );
      assert.deepEqual(await idleListed(), []);
      assert.equal(commands.forShard(busy).filter((c) => c.type === 'stop').length, 0);
      // No policy: nothing is judged.
      assertOk(await h.graphql(SET_IDLE, { teamId: team.id, idle: null, stop: null }));
      assert.deepEqual(await sweeper.sweep(t0 + 3_600_000), []);
    });
  });
}

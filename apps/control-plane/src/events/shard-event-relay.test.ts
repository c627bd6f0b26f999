import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from 'graphql-ws';
import { WebSocket } from 'ws';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { createControlPlane, type ControlPlane } from '../control-plane.js';
import { FenceService } from '../fence/fence.service.js';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import {
  assertOk,
  createShard,
  createTestTeam,
  gpuUuidOf,
  heartbeat,
  registerRequest,
  stateEvent,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, type PostgresServer } from '../testing/index.js';
import { ShardEventBus } from './shard-event-bus.js';
import { MAX_NOTIFY_PAYLOAD_BYTES, payloadsOf, SHARD_EVENTS_CHANNEL } from './shard-event-relay.js';

interface Heard {
  readonly id: string;
  readonly state: string;
  readonly previousState: string | null;
  readonly teamId: string;
}

/** A shardEvents subscription on one control plane, collecting what it hears. */
function listen(controlPlane: ControlPlane, token: string) {
  const heard: Heard[] = [];
  const errors: unknown[] = [];
  const client = createClient({
    url: controlPlane.graphqlUrl.replace(/^http/, 'ws'),
    webSocketImpl: WebSocket,
    connectionParams: { Authorization: `Bearer ${token}` },
    retryAttempts: 0,
  });
  client.subscribe<{
    shardEvents: { state: string; previousState: string | null; shard: Heard };
  }>(
    { query: 'subscription { shardEvents { state previousState shard { id teamId } } }' },
    {
      next: (message) => {
        const event = message.data?.shardEvents;
        if (event === undefined) return;
        heard.push({
          id: event.shard.id,
          state: event.state,
          previousState: event.previousState,
          teamId: event.shard.teamId,
        });
      },
      error: (error) => errors.push(error),
      complete: () => undefined,
    },
  );
  return { heard, errors, dispose: () => client.dispose() };
}

/** Ends the subscriptions and waits until the servers have let go of them. */
async function closeAll(
  controlPlanes: readonly ControlPlane[],
  subscriptions: readonly { dispose: () => unknown }[],
): Promise<void> {
  for (const subscription of subscriptions) await subscription.dispose();
  const buses = controlPlanes.map((cp) => cp.app.get(ShardEventBus));
  await until(() => buses.every((bus) => bus.subscriberCount === 0), 'subscriptions to end');
}

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 250 && !condition(); i++) await sleep(20);
  assert.ok(condition(), `timed out waiting for ${what}`);
}

describe('shard events across two control planes on one PostgreSQL', () => {
  let postgres: PostgresServer;
  let h: ApiTestHarness;
  let other: ControlPlane;
  let otherDataDir: string;
  let alpha: TestTeam;
  let beta: TestTeam;

  before(async () => {
    postgres = await startPostgres();
    h = await startApiTestHarness('postgres', { server: postgres });
    otherDataDir = await mkdtemp(join(tmpdir(), 'gpushards-relay-'));
    other = await createControlPlane({
      dataDir: otherDataDir,
      database: h.controlPlane.config.database,
      port: 0,
      logLevel: 'silent',
      operatorOutput: { write: () => true } as unknown as NodeJS.WritableStream,
    });
    await h.controlPlane.app.get(AgentReportsService).registerHost(registerRequest('relay-1'));
    alpha = await createTestTeam(h, 'alpha');
    beta = await createTestTeam(h, 'beta');
  });

  after(async () => {
    await other?.close();
    await h?.close();
    await postgres?.stop();
    if (otherDataDir) await rm(otherDataDir, { recursive: true, force: true });
  });

  it("a subscriber hears its team's changes made by the other control plane, once, in order", async () => {
    const onOther = listen(other, alpha.viewer);
    const onSame = listen(h.controlPlane, alpha.viewer);
    const buses = [h.controlPlane, other].map((cp) => cp.app.get(ShardEventBus));
    await until(() => buses.every((bus) => bus.subscriberCount === 1), 'both subscriptions');
    try {
      const shard = assertOk(await createShard(h, alpha.member, {})).createShard;
      assertOk(await createShard(h, beta.member, {}));
      await h.controlPlane.app
        .get(AgentReportsService)
        .applyShardStateEvent('relay-1', stateEvent('relay-1', shard.id, 'RUNNING', new Date()));
      await until(() => onOther.heard.length >= 2, 'two events on the other control plane');
      await sleep(300);
      const expected = [
        { id: shard.id, state: 'PLACED', previousState: null, teamId: alpha.id },
        { id: shard.id, state: 'RUNNING', previousState: 'PLACED', teamId: alpha.id },
      ];
      assert.deepEqual(onOther.heard, expected, 'relayed, team-scoped, in order');
      assert.deepEqual(onSame.heard, expected, 'heard first hand once, not again by relay');
      assert.deepEqual([...onOther.errors, ...onSame.errors], []);
    } finally {
      await closeAll([h.controlPlane, other], [onOther, onSame]);
    }
  });

  it('changes go the other way too (stopShard on the second control plane)', async () => {
    const onFirst = listen(h.controlPlane, h.adminToken);
    const bus = h.controlPlane.app.get(ShardEventBus);
    await until(() => bus.subscriberCount === 1, 'the subscription');
    try {
      const shard = assertOk(await createShard(h, beta.member, { name: 'to-stop' })).createShard;
      await until(() => onFirst.heard.length === 1, 'the PLACED event');
      const stopped = await fetch(other.graphqlUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${beta.member}` },
        body: JSON.stringify({
          query: 'mutation ($id: ID!) { stopShard(id: $id) { state } }',
          variables: { id: shard.id },
        }),
      });
      assert.deepEqual(await stopped.json(), { data: { stopShard: { state: 'STOPPING' } } });
      await until(() => onFirst.heard.length === 2, 'the STOPPING event from the other one');
      assert.deepEqual(onFirst.heard[1], {
        id: shard.id,
        state: 'STOPPING',
        previousState: 'PLACED',
        teamId: beta.id,
      });
    } finally {
      await closeAll([h.controlPlane, other], [onFirst]);
    }
  });

  it('ungoverned GPU work found through one control plane reaches a subscriber of the other, finding and all', async () => {
    const heard: { kind: string; ungovernedCompute: Record<string, unknown> | null }[] = [];
    const client = createClient({
      url: other.graphqlUrl.replace(/^http/, 'ws'),
      webSocketImpl: WebSocket,
      connectionParams: { Authorization: `Bearer ${alpha.viewer}` },
      retryAttempts: 0,
    });
    client.subscribe<{ shardEvents: (typeof heard)[number] }>(
      {
        query:
          'subscription { shardEvents { kind ungovernedCompute { action pid pids killedPids lastKernelAt message } } }',
      },
      {
        next: (message) => {
          if (message.data?.shardEvents) heard.push(message.data.shardEvents);
        },
        error: () => undefined,
        complete: () => undefined,
      },
    );
    const bus = other.app.get(ShardEventBus);
    await until(() => bus.subscriberCount === 1, 'the subscription');
    try {
      const shard = assertOk(await createShard(h, alpha.member, { name: 'bypass' })).createShard;
      await until(() => heard.length === 1, 'the PLACED event');
      const at = new Date();
      await h.controlPlane.app.get(FenceService).recordHeartbeat('relay-1', {
        ...heartbeat('relay-1', at),
        ungovernedCompute: [
          {
            shardId: shard.id,
            gpuUuid: gpuUuidOf('relay-1', 0),
            action: 'report',
            pid: 77,
            smPercent: 46,
            pids: [77],
            busyPercent: 46,
            samples: 5,
            busySamples: 5,
            thresholdPercent: 10,
            windowSeconds: 5,
            killedPids: [],
            at: at.toISOString(),
          },
        ],
      });
      await until(() => heard.length === 2, 'the UNGOVERNED_COMPUTE event');
      assert.deepEqual(heard[1], {
        kind: 'UNGOVERNED_COMPUTE',
        ungovernedCompute: {
          action: 'REPORT',
          pid: 77,
          pids: [77],
          killedPids: [],
          lastKernelAt: null,
          message:
            'ungoverned GPU work: pid 77 ran kernels outside the compute ledger (smUtil 46 % over 5 s)',
        },
      });
    } finally {
      await closeAll([h.controlPlane, other], [{ dispose: () => client.dispose() }]);
    }
  });

  it('a malformed message on the channel is ignored; later changes still arrive', async () => {
    const onOther = listen(other, h.adminToken);
    const bus = other.app.get(ShardEventBus);
    await until(() => bus.subscriberCount === 1, 'the subscription');
    try {
      for (const payload of [
        'not json',
        '{"origin":"x","changes":[{"id":"nope","state":"RUNNING"}]}',
        JSON.stringify({ origin: 'x', changes: 'all' }),
      ]) {
        await h.prisma.$executeRaw`SELECT pg_notify(${SHARD_EVENTS_CHANNEL}, ${payload})`;
      }
      const shard = assertOk(await createShard(h, alpha.member, { name: 'after' })).createShard;
      await until(() => onOther.heard.length === 1, 'the event after the bad messages');
      assert.equal(onOther.heard[0]!.id, shard.id);
      assert.equal(other.app.get(ShardEventBus).subscriberCount, 1, 'still subscribed');
    } finally {
      await closeAll([h.controlPlane, other], [onOther]);
    }
  });
});

describe('payloadsOf', () => {
  it('splits changes into NOTIFY payloads under the limit, keeping their order', () => {
    const changes = Array.from({ length: 500 }, (_, i) => ({
      id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      previousState: i % 2 === 0 ? null : 'PLACED',
      state: 'RUNNING',
      at: new Date(i).toISOString(),
    }));
    const payloads = payloadsOf('origin', changes);
    assert.ok(payloads.length > 1);
    for (const payload of payloads) {
      assert.ok(Buffer.byteLength(payload) <= MAX_NOTIFY_PAYLOAD_BYTES, `${payload.length}`);
    }
    const parsed = payloads.flatMap((p) => (JSON.parse(p) as { changes: unknown[] }).changes);
    assert.deepEqual(parsed, changes);
    assert.deepEqual(payloadsOf('origin', []), []);
  });
});

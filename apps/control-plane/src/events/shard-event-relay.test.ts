import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createClient } from 'graphql-ws';
import { WebSocket } from 'ws';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { within } from '../testing/bounded-wait.js';
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

/** Until the control planes' buses have `count` subscribers each (subscribed, or let go). */
async function subscribers(controlPlanes: readonly ControlPlane[], count: number): Promise<void> {
  const buses = controlPlanes.map((cp) => cp.app.get(ShardEventBus));
  await within(
    Promise.all(buses.map((bus) => bus.whenSubscribers((n) => n === count))),
    () => `${count} subscriber(s) on each bus (now ${buses.map((b) => b.subscriberCount)})`,
  );
}

/**
 * A shardEvents subscription on one control plane, collecting what `pick` makes of each event.
 * `until` waits on the events themselves: its condition is checked at each message, and the
 * wait fails when the subscription errs or ends first.
 */
function subscribe<T>(
  controlPlane: ControlPlane,
  token: string,
  query: string,
  pick: (event: Record<string, unknown>) => T,
) {
  const heard: T[] = [];
  const errors: unknown[] = [];
  let ended: string | undefined;
  const waiters = new Set<() => void>();
  const changed = () => {
    for (const check of [...waiters]) check();
  };
  const client = createClient({
    url: controlPlane.graphqlUrl.replace(/^http/, 'ws'),
    webSocketImpl: WebSocket,
    connectionParams: { Authorization: `Bearer ${token}` },
    retryAttempts: 0,
  });
  client.subscribe<{ shardEvents: Record<string, unknown> }>(
    { query },
    {
      next: (message) => {
        const event = message.data?.shardEvents;
        if (event !== undefined) heard.push(pick(event));
        if (message.errors !== undefined) errors.push(...message.errors);
        changed();
      },
      error: (error) => {
        errors.push(error);
        ended = `an error: ${JSON.stringify(error)}`;
        changed();
      },
      complete: () => {
        ended ??= 'completion';
        changed();
      },
    },
  );
  const until = (holds: (heard: readonly T[]) => boolean, what: string): Promise<void> => {
    let check!: () => void;
    const waited = new Promise<void>((resolve, reject) => {
      check = () => {
        if (holds(heard)) resolve();
        else if (ended !== undefined)
          reject(new Error(`${what}: the subscription ended with ${ended}`));
        else return;
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });
    return within(waited, () => `${what} (heard ${JSON.stringify(heard)})`).finally(() =>
      waiters.delete(check),
    );
  };
  return { heard, errors, until, dispose: () => client.dispose() };
}

interface Heard {
  readonly id: string;
  readonly state: string;
  readonly previousState: string | null;
  readonly teamId: string;
}

/** A shardEvents subscription of the shard, its state and previous state. */
function listen(controlPlane: ControlPlane, token: string) {
  return subscribe<Heard>(
    controlPlane,
    token,
    'subscription { shardEvents { state previousState shard { id teamId } } }',
    (event) => {
      const { state, previousState, shard } = event as {
        state: string;
        previousState: string | null;
        shard: { id: string; teamId: string };
      };
      return { id: shard.id, state, previousState, teamId: shard.teamId };
    },
  );
}

/** Ends the subscriptions and waits until the servers have let go of them. */
async function closeAll(
  controlPlanes: readonly ControlPlane[],
  subscriptions: readonly { dispose: () => unknown }[],
): Promise<void> {
  for (const subscription of subscriptions) await subscription.dispose();
  await subscribers(controlPlanes, 0);
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
    await subscribers([h.controlPlane, other], 1);
    try {
      const reports = (cp: ControlPlane) => cp.app.get(AgentReportsService);
      const shard = assertOk(await createShard(h, alpha.member, {})).createShard;
      assertOk(await createShard(h, beta.member, {}));
      await reports(h.controlPlane).applyShardStateEvent(
        'relay-1',
        stateEvent('relay-1', shard.id, 'RUNNING', new Date()),
      );
      // Two sentinels instead of a pause: what either subscriber hears arrives in order, so a
      // duplicate (or a stray) of the changes above would arrive before the sentinel that
      // travels its path. The first is made here too: the other control plane hears it after
      // anything this one's relay sent before it. The second is made on the other control
      // plane once the first got there: its NOTIFY commits after every NOTIFY of this one's
      // (which this one's relay must ignore), and PostgreSQL delivers notifications in commit
      // order, which the relay keeps; so a change this one heard first hand and again by relay
      // would be heard again before the second sentinel.
      const sentinel = assertOk(
        await createShard(h, alpha.member, { name: 'sentinel' }),
      ).createShard;
      const heardSentinel = (state: string) => (heard: readonly Heard[]) =>
        heard.some((event) => event.id === sentinel.id && event.state === state);
      await Promise.all([
        onOther.until(heardSentinel('PLACED'), 'the first sentinel on the other control plane'),
        onSame.until(heardSentinel('PLACED'), 'the first sentinel on this control plane'),
      ]);
      await reports(other).applyShardStateEvent(
        'relay-1',
        stateEvent('relay-1', sentinel.id, 'RUNNING', new Date()),
      );
      await Promise.all([
        onOther.until(heardSentinel('RUNNING'), 'the second sentinel on the other control plane'),
        onSame.until(heardSentinel('RUNNING'), 'the second sentinel on this control plane'),
      ]);
      const expected = [
        { id: shard.id, state: 'PLACED', previousState: null, teamId: alpha.id },
        { id: shard.id, state: 'RUNNING', previousState: 'PLACED', teamId: alpha.id },
        { id: sentinel.id, state: 'PLACED', previousState: null, teamId: alpha.id },
        { id: sentinel.id, state: 'RUNNING', previousState: 'PLACED', teamId: alpha.id },
      ];
      assert.deepEqual(onOther.heard, expected, 'relayed, team-scoped, once, in order');
      assert.deepEqual(onSame.heard, expected, 'heard first hand once, not again by relay');
      assert.deepEqual([...onOther.errors, ...onSame.errors], []);
    } finally {
      await closeAll([h.controlPlane, other], [onOther, onSame]);
    }
  });

  it('changes go the other way too (stopShard on the second control plane)', async () => {
    const onFirst = listen(h.controlPlane, h.adminToken);
    await subscribers([h.controlPlane], 1);
    try {
      const shard = assertOk(await createShard(h, beta.member, { name: 'to-stop' })).createShard;
      await onFirst.until((heard) => heard.length >= 1, 'the PLACED event');
      const stopped = await fetch(other.graphqlUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${beta.member}` },
        body: JSON.stringify({
          query: 'mutation ($id: ID!) { stopShard(id: $id) { state } }',
          variables: { id: shard.id },
        }),
      });
      assert.deepEqual(await stopped.json(), { data: { stopShard: { state: 'STOPPING' } } });
      await onFirst.until((heard) => heard.length >= 2, 'the STOPPING event from the other one');
      assert.deepEqual(onFirst.heard, [
        { id: shard.id, state: 'PLACED', previousState: null, teamId: beta.id },
        { id: shard.id, state: 'STOPPING', previousState: 'PLACED', teamId: beta.id },
      ]);
      assert.deepEqual(onFirst.errors, []);
    } finally {
      await closeAll([h.controlPlane, other], [onFirst]);
    }
  });

  it('ungoverned GPU work found through one control plane reaches a subscriber of the other, finding and all', async () => {
    const onOther = subscribe(
      other,
      alpha.viewer,
      'subscription { shardEvents { kind ungovernedCompute { action pid pids killedPids lastKernelAt message } } }',
      (event) => event as { kind: string; ungovernedCompute: Record<string, unknown> | null },
    );
    await subscribers([other], 1);
    try {
      const shard = assertOk(await createShard(h, alpha.member, { name: 'bypass' })).createShard;
      await onOther.until((heard) => heard.length >= 1, 'the PLACED event');
      const at = new Date();
      await h.controlPlane.app.get(FenceService).recordFindings('relay-1', {
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
      await onOther.until((heard) => heard.length >= 2, 'the UNGOVERNED_COMPUTE event');
      assert.deepEqual(onOther.heard[1], {
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
      await closeAll([h.controlPlane, other], [onOther]);
    }
  });

  it('a malformed message on the channel is ignored; later changes still arrive', async () => {
    const onOther = listen(other, h.adminToken);
    await subscribers([other], 1);
    try {
      for (const payload of [
        'not json',
        '{"origin":"x","changes":[{"id":"nope","state":"RUNNING"}]}',
        JSON.stringify({ origin: 'x', changes: 'all' }),
      ]) {
        await h.prisma.$executeRaw`SELECT pg_notify(${SHARD_EVENTS_CHANNEL}, ${payload})`;
      }
      const shard = assertOk(await createShard(h, alpha.member, { name: 'after' })).createShard;
      await onOther.until((heard) => heard.length >= 1, 'the event after the bad messages');
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

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { it } from 'node:test';
import { createClient } from 'graphql-ws';
import { WebSocket } from 'ws';
import { ShardEventBus } from '../events/shard-event-bus.js';
import {
  assertError,
  assertOk,
  createShard,
  shardRowCounts,
  stateEvent,
} from '../testing/fleet-fixtures.js';
import {
  describeShardsApi,
  SHARD,
  SHARDS,
  STOP,
  DELETE,
  RESIZE,
  HOST_SHARDS,
} from '../testing/shards-api-fixtures.js';

/**
 * Who may do what: creating for a team, team isolation of every shard call, and shardEvents
 * delivered only to the caller's team (admins: all).
 */
describeShardsApi('authorization', (api) => {
  it('who may create for which team: admins must name one, members only their own, viewers not at all', async () => {
    const { h, alpha, beta } = api;
    const before = await shardRowCounts(h);
    assertError(await createShard(h, h.adminToken, {}), 'BAD_USER_INPUT', 'admin without team');
    assertError(await createShard(h, alpha.member, { teamId: beta.id }), 'NOT_FOUND');
    assertError(await createShard(h, alpha.viewer, {}), 'FORBIDDEN');
    assertError(await createShard(h, h.adminToken, { teamId: randomUUID() }), 'NOT_FOUND');
    assert.deepEqual(await shardRowCounts(h), before);
    const admin = assertOk(
      await createShard(h, h.adminToken, {
        teamId: beta.id,
        hostSelector: [{ key: 'pool', value: 'l4' }],
        memoryPerGpu: '1g',
      }),
    );
    assert.equal(admin.createShard.teamId, beta.id);
  });

  it('team isolation: another team cannot see, list, stop, resize or delete a shard', async () => {
    const { h, alpha, beta, registerPool } = api;
    await registerPool('iso', ['iso-1']);
    const mine = assertOk(
      await createShard(h, alpha.member, { hostSelector: [{ key: 'pool', value: 'iso' }] }),
    ).createShard;
    const before = await h.prisma.shard.findUniqueOrThrow({ where: { id: mine.id } });
    assertError(await h.graphql(SHARD, { id: mine.id }, beta.member), 'NOT_FOUND');
    assertError(await h.graphql(STOP, { id: mine.id }, beta.member), 'NOT_FOUND');
    assertError(await h.graphql(DELETE, { id: mine.id }, beta.member), 'NOT_FOUND');
    assertError(await h.graphql(RESIZE, { id: mine.id, size: '9g' }, beta.member), 'NOT_FOUND');
    assertError(await h.graphql(STOP, { id: mine.id }, alpha.viewer), 'FORBIDDEN');
    const listed = assertOk(
      await h.graphql<{ shards: { edges: { node: { teamId: string } }[] } }>(
        SHARDS,
        { first: 500 },
        beta.member,
      ),
    );
    assert.ok(listed.shards.edges.every((e) => e.node.teamId === beta.id));
    const asked = assertOk(
      await h.graphql<{ shards: { edges: unknown[] } }>(SHARDS, { teamId: alpha.id }, beta.member),
    );
    assert.equal(asked.shards.edges.length, 0);
    const onHost = assertOk(
      await h.graphql<{ host: { shards: { edges: { node: { id: string } }[] } } }>(
        HOST_SHARDS,
        { id: 'iso-1' },
        beta.member,
      ),
    );
    assert.equal(
      onHost.host.shards.edges.length,
      0,
      "a host lists only the caller's team's shards",
    );
    const own = assertOk(
      await h.graphql<{ host: { shards: { edges: { node: { id: string } }[] } } }>(
        HOST_SHARDS,
        { id: 'iso-1' },
        alpha.viewer,
      ),
    );
    assert.deepEqual(
      own.host.shards.edges.map((e) => e.node.id),
      [mine.id],
    );
    assert.deepEqual(await h.prisma.shard.findUniqueOrThrow({ where: { id: mine.id } }), before);
    assertError(await h.graphql(SHARD, { id: 'nope' }, alpha.member), 'BAD_USER_INPUT');
  });

  it("shardEvents streams state changes of the caller's team only (admins: all)", async () => {
    const { h, fleet, alpha, beta, registerPool } = api;
    await registerPool('events', ['events-1']);
    const bus = h.controlPlane.app.get(ShardEventBus);
    const wsUrl = h.controlPlane.graphqlUrl.replace(/^http/, 'ws');
    const listen = (token: string) => {
      const received: { state: string; teamId: string; previousState: string | null }[] = [];
      const client = createClient({
        url: wsUrl,
        webSocketImpl: WebSocket,
        connectionParams: { Authorization: `Bearer ${token}` },
        retryAttempts: 0,
      });
      const errors: unknown[] = [];
      // Waiters for a number of events, checked at each message (an error ends every wait,
      // and the assertions below say what went wrong).
      const waiters = new Set<() => void>();
      const changed = () => {
        for (const check of [...waiters]) check();
      };
      const heard = (count: number) =>
        new Promise<void>((resolve) => {
          const check = () => {
            if (received.length < count && errors.length === 0) return;
            waiters.delete(check);
            resolve();
          };
          waiters.add(check);
          check();
        });
      client.subscribe<{
        shardEvents: { state: string; previousState: string | null; shard: { teamId: string } };
      }>(
        {
          query:
            'subscription { shardEvents { state previousState at shard { id teamId state } } }',
        },
        {
          next: (message) => {
            const event = message.data?.shardEvents;
            if (event)
              received.push({
                state: event.state,
                teamId: event.shard.teamId,
                previousState: event.previousState,
              });
            changed();
          },
          error: (error) => {
            errors.push(error);
            changed();
          },
          complete: () => undefined,
        },
      );
      return { received, errors, heard, dispose: () => client.dispose() };
    };
    const listeners = bus.subscriberCount;
    const mine = listen(alpha.viewer);
    const admin = listen(h.adminToken);
    await bus.whenSubscribers((count) => count === listeners + 2);
    assert.equal(bus.subscriberCount, listeners + 2);
    try {
      const selector = [{ key: 'pool', value: 'events' }];
      const a = assertOk(
        await createShard(h, alpha.member, { hostSelector: selector }),
      ).createShard;
      assertOk(await createShard(h, beta.member, { hostSelector: selector }));
      await fleet.applyShardStateEvent(
        'events-1',
        stateEvent('events-1', a.id, 'RUNNING', new Date()),
      );
      await Promise.all([mine.heard(2), admin.heard(3)]);
      assert.deepEqual(mine.received, [
        { state: 'PLACED', teamId: alpha.id, previousState: null },
        { state: 'RUNNING', teamId: alpha.id, previousState: 'PLACED' },
      ]);
      assert.equal(admin.received.length, 3);
      assert.deepEqual(new Set(admin.received.map((e) => e.teamId)), new Set([alpha.id, beta.id]));
      assert.deepEqual(mine.errors, []);
    } finally {
      await mine.dispose();
      await admin.dispose();
    }
    await bus.whenSubscribers((count) => count === listeners);
    assert.equal(bus.subscriberCount, listeners, 'closing the socket ends the subscription');
  });

  it("shardEvents for another team's id is refused", async () => {
    const { h, alpha, beta } = api;
    const client = createClient({
      url: h.controlPlane.graphqlUrl.replace(/^http/, 'ws'),
      webSocketImpl: WebSocket,
      connectionParams: { Authorization: `Bearer ${alpha.viewer}` },
      retryAttempts: 0,
    });
    try {
      const errors = await new Promise<readonly { extensions?: { code?: string } }[]>((resolve) => {
        client.subscribe(
          {
            query: 'subscription ($t: ID) { shardEvents(teamId: $t) { state } }',
            variables: { t: beta.id },
          },
          {
            next: (message) => resolve((message.errors ?? []) as never),
            error: (error) => resolve(Array.isArray(error) ? error : [error as never]),
            complete: () => resolve([]),
          },
        );
      });
      assert.equal(errors[0]?.extensions?.code, 'NOT_FOUND', JSON.stringify(errors));
    } finally {
      await client.dispose();
    }
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ControlPlaneConfig } from '../config/control-plane-config.js';
import { FenceService } from '../fence/fence.service.js';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import type { ShardRecord } from '../shards/shard-record.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  gpuUuidOf,
  heartbeat,
  registerRequest,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, type PostgresServer } from '../testing/index.js';
import type { ShardStateChange } from './shard-event-bus.js';
import { ShardEventRetentionSweeper, SHARD_EVENT_DELETE_BATCH } from './shard-event-retention.js';
import { recordShardEvents } from './shard-event-store.js';

/**
 * The stored shard events on PostgreSQL: each change is stored in the transaction that commits
 * it (and not when it rolls back), read back page by page (shardEventHistory, teamShardEvents)
 * with the subscription's team scope, and pruned by the retention sweep.
 */

const SHARD_HISTORY = `query ($shardId: ID!, $first: Int, $after: String, $kinds: [ShardEventKind!]) {
  shardEventHistory(shardId: $shardId, first: $first, after: $after, kinds: $kinds) {
    edges { cursor node { id kind state previousState at shard { id name }
      ungovernedCompute { action message killedPids } } }
    pageInfo { hasNextPage endCursor }
  }
}`;

const TEAM_HISTORY = `query ($teamId: ID, $first: Int, $after: String, $kinds: [ShardEventKind!]) {
  teamShardEvents(teamId: $teamId, first: $first, after: $after, kinds: $kinds) {
    edges { node { id kind state shard { id } ungovernedCompute { message } } }
    pageInfo { hasNextPage endCursor }
  }
}`;

interface Node {
  id: string;
  kind: string;
  state: string;
  previousState: string | null;
  at: string;
  shard: { id: string };
  ungovernedCompute: { action: string; message: string; killedPids: number[] } | null;
}

interface Page {
  edges: { cursor: string; node: Node }[];
  pageInfo: { hasNextPage: boolean; endCursor: string | null };
}

let postgres: PostgresServer;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

describe('shard event history (PostgreSQL)', () => {
  let h: ApiTestHarness;
  let team: TestTeam;
  let other: TestTeam;
  let shard: { id: string; teamId: string };

  before(async () => {
    h = await startApiTestHarness('postgres', { server: postgres });
    team = await createTestTeam(h, 'history-team');
    other = await createTestTeam(h, 'history-other');
    const fleet = h.controlPlane.app.get(AgentReportsService);
    await fleet.registerHost(registerRequest('hist-1', { gpus: 2 }));
    shard = assertOk(await createShard(h, team.member, { name: 'kept' })).createShard;
  });
  after(async () => {
    await h?.close();
  });

  const history = async (token: string, variables: Record<string, unknown>) =>
    h.graphql<{ shardEventHistory: Page }>(SHARD_HISTORY, variables, token);

  it('stores each change with its commit and each notice, newest first, with ids', async () => {
    assertOk(
      await h.graphql(
        `mutation ($id: ID!) { stopShard(id: $id) { state } }`,
        { id: shard.id },
        team.member,
      ),
    );
    const at = new Date();
    await h.controlPlane.app.get(FenceService).recordFindings('hist-1', {
      ...heartbeat('hist-1', at),
      ungovernedCompute: [
        {
          shardId: shard.id,
          gpuUuid: gpuUuidOf('hist-1', 0),
          action: 'kill',
          pid: 4242,
          smPercent: 67.6,
          pids: [4242],
          busyPercent: 70,
          samples: 10,
          busySamples: 9,
          thresholdPercent: 10,
          windowSeconds: 5,
          killedPids: [4242],
          at: new Date(at.getTime() + 1).toISOString(),
        },
      ],
    });
    const page = assertOk(await history(team.viewer, { shardId: shard.id })).shardEventHistory;
    assert.deepEqual(
      page.edges.map(({ node }) => [node.kind, node.previousState, node.state]),
      [
        ['UNGOVERNED_COMPUTE', 'STOPPING', 'STOPPING'],
        ['STATE', 'PLACED', 'STOPPING'],
        ['STATE', null, 'PLACED'],
      ],
    );
    assert.ok(page.edges.every(({ node }) => /^\d+$/.test(node.id)));
    assert.equal(new Set(page.edges.map(({ node }) => node.id)).size, 3);
    assert.deepEqual(page.edges[0]!.node.ungovernedCompute, {
      action: 'KILL',
      killedPids: [4242],
      message:
        'ungoverned GPU work: pid 4242 ran kernels outside the compute ledger (smUtil 68 % over 5 s)',
    });
    const notices = assertOk(
      await h.graphql<{ teamShardEvents: Page }>(
        TEAM_HISTORY,
        { kinds: ['UNGOVERNED_COMPUTE'] },
        team.member,
      ),
    ).teamShardEvents;
    assert.deepEqual(
      notices.edges.map(({ node }) => [node.kind, node.shard.id, node.id]),
      [['UNGOVERNED_COMPUTE', shard.id, page.edges[0]!.node.id]],
    );
  });

  it('stores nothing of a transaction that rolls back', async () => {
    const created = assertOk(
      await createShard(h, team.member, { name: 'rolled-back' }),
    ).createShard;
    const lifecycle = h.controlPlane.app.get(ShardLifecycle);
    const effects = new CommitEffects();
    await assert.rejects(
      h.prisma.direct.transaction(async (tx) => {
        const locked = await lifecycle.lock(tx, created.id);
        await lifecycle.moveTo(tx, locked!, 'DELETED', 'deleted', {}, effects);
        // Stored inside the transaction, as its commit would keep it.
        const [inside] = await tx.$queryRaw<{ n: number }[]>`
          SELECT count(*)::int AS n FROM shard_event WHERE shard_id = ${created.id}::uuid AND state = 'DELETED'`;
        assert.equal(inside!.n, 1);
        throw new Error('roll back');
      }),
      /roll back/,
    );
    assert.equal(effects.changes.length, 1, 'the change was made, then rolled back');
    const page = assertOk(await history(team.member, { shardId: created.id })).shardEventHistory;
    assert.deepEqual(
      page.edges.map(({ node }) => node.state),
      ['PLACED'],
    );
  });

  it('pages newest first by (at, id), ties included, and refuses bad arguments', async () => {
    const [row] = await h.prisma.$queryRaw<ShardRecord[]>`
      SELECT id, team_id AS "teamId" FROM shard WHERE id = ${shard.id}::uuid`;
    const base = Date.parse('2030-01-01T00:00:00Z');
    // Seven events, three of them at the same millisecond.
    const changes: ShardStateChange[] = [0, 1, 2, 2, 2, 3, 4].map((ms, i) => ({
      shard: row!,
      previousState: 'RUNNING',
      state: i % 2 === 0 ? 'RUNNING' : 'STOPPING',
      at: new Date(base + ms),
    }));
    await h.prisma.direct.transaction((tx) => recordShardEvents(tx, changes));
    const all = assertOk(
      await history(team.member, { shardId: shard.id, first: 500 }),
    ).shardEventHistory.edges.map(({ node }) => node.id);
    const seen: string[] = [];
    let after: string | null = null;
    for (let pages = 0; pages < 10; pages++) {
      const page: Page = assertOk(
        await history(team.member, { shardId: shard.id, first: 3, after }),
      ).shardEventHistory;
      seen.push(...page.edges.map(({ node }) => node.id));
      after = page.pageInfo.endCursor;
      if (!page.pageInfo.hasNextPage) break;
    }
    assert.deepEqual(seen, all);
    assert.equal(all.length, 10);
    // The seven in order: newest first, the tie by id (the order they were written) descending.
    const written = changes.map((change) => change.eventId!);
    assert.deepEqual(all.slice(0, 7), [...written].reverse());

    assertError(await history(team.member, { shardId: 'not-an-id' }), 'BAD_USER_INPUT');
    assertError(
      await history(team.member, { shardId: shard.id, after: 'bm9wZQ' }),
      'BAD_USER_INPUT',
    );
    assertError(await history(team.member, { shardId: shard.id, first: 0 }), 'BAD_USER_INPUT');
    assertError(
      await history(team.member, { shardId: '00000000-0000-4000-8000-000000000000' }),
      'NOT_FOUND',
    );
  });

  it("refuses another team's shard and team, and lists only the caller's team", async () => {
    assertError(await history(other.member, { shardId: shard.id }), 'NOT_FOUND');
    assertError(await h.graphql(TEAM_HISTORY, { teamId: team.id }, other.viewer), 'NOT_FOUND');
    const own = assertOk(
      await h.graphql<{ teamShardEvents: Page }>(TEAM_HISTORY, {}, other.member),
    ).teamShardEvents;
    assert.deepEqual(own.edges, []);
    const admin = assertOk(
      await h.graphql<{ teamShardEvents: Page }>(TEAM_HISTORY, { teamId: team.id, first: 500 }),
    ).teamShardEvents;
    assert.ok(admin.edges.length > 0);
    assert.ok(admin.edges.every(({ node }) => node.shard.id !== undefined));
    // The cost model counts the page size: 500 events, each with its host's 500 shards, is refused.
    const costly = await h.graphql(
      `{ teamShardEvents(first: 500) { edges { node { shard { host { shards(first: 500) { edges { node { id } } } } } } } } }`,
      {},
      team.member,
    );
    assertError(costly, 'QUERY_TOO_COMPLEX');
  });

  it('the retention sweep keeps the newest per shard and drops old events, in batches', async () => {
    const [row] = await h.prisma.$queryRaw<ShardRecord[]>`
      SELECT id, team_id AS "teamId" FROM shard WHERE id = ${shard.id}::uuid`;
    const now = new Date();
    const old = new Date(now.getTime() - 3 * 86_400_000);
    const oldOnes = SHARD_EVENT_DELETE_BATCH * 2 + 5;
    const oldShard = { ...row!, id: '11111111-1111-4111-8111-111111111111' };
    await h.prisma.direct.transaction((tx) =>
      recordShardEvents(
        tx,
        Array.from({ length: oldOnes }, () => ({
          shard: oldShard,
          previousState: 'RUNNING',
          state: 'RUNNING',
          at: old,
        })),
      ),
    );
    const sweeper = new ShardEventRetentionSweeper(
      h.prisma,
      { shardEventRetention: { maxPerShard: 4, maxAgeDays: 2 } } as ControlPlaneConfig,
      h.controlPlane.app.get<Logger>(LOGGER),
    );
    const before = assertOk(
      await history(team.member, { shardId: shard.id, first: 500 }),
    ).shardEventHistory.edges.map(({ node }) => node.id);
    assert.ok(before.length > 4);
    const swept = await sweeper.sweep(now);
    assert.equal(swept.tooOld, oldOnes);
    const kept = assertOk(
      await history(team.member, { shardId: shard.id, first: 500 }),
    ).shardEventHistory.edges.map(({ node }) => node.id);
    assert.deepEqual(kept, before.slice(0, 4), 'the newest four');
    const [left] = await h.prisma.$queryRaw<{ n: number }[]>`
      SELECT count(*)::int AS n FROM shard_event WHERE shard_id = ${oldShard.id}::uuid`;
    assert.equal(left!.n, 0);
    // Nothing new since: the next sweep looks at no shard and removes nothing.
    assert.deepEqual(await sweeper.sweep(now), { tooOld: 0, overPerShard: 0 });
  });
});

import assert from 'node:assert/strict';
import { it } from 'node:test';
import {
  agentSubjects,
  decodeMessage,
  encodeMessage,
  registerReplySchema,
  registerRequestSchema,
} from '@gpushards/protocol';
import { Registry } from 'prom-client';
import { AgentMessagesService } from '../agent-link/agent-messages.service.js';
import { CapPolicies } from '../fence/cap-policies.js';
import { FenceService } from '../fence/fence.service.js';
import { RemovedHosts } from '../fleet/removed-hosts.js';
import { LOGGER } from '../logging/logger.js';
import { QueueService } from '../queue/queue.service.js';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  registerRequest,
  stateEvent,
  type ShardResult,
} from '../testing/fleet-fixtures.js';
import { describeShardsApi, STOP } from '../testing/shards-api-fixtures.js';
import { ElasticService } from '../elastic/elastic.service.js';

/**
 * What comes after creation, through HTTP GraphQL: startShard, a team's rename, archive and
 * delete (drainFirst), and removeHost; each with its audit event and metric.
 */

const START = `mutation ($id: ID!) { startShard(id: $id) { id name state hostId version stoppedAt exitCode } }`;
const RENAME = `mutation ($id: ID!, $name: String!) { renameTeam(id: $id, name: $name) { id name } }`;
const ARCHIVE = `mutation ($id: ID!) { archiveTeam(id: $id) { id archivedAt } }`;
const UNARCHIVE = `mutation ($id: ID!) { unarchiveTeam(id: $id) { id archivedAt } }`;
const DELETE_TEAM = `mutation ($id: ID!, $drain: Boolean) {
  deleteTeam(id: $id, drainFirst: $drain) { id name deleted stoppingShards }
}`;
const REMOVE_HOST = `mutation ($id: ID!) { removeHost(id: $id) { id state cordoned } }`;
const DRAIN_HOST = `mutation ($id: ID!) { drainHost(id: $id) { id state } }`;
const ME = `{ me { id } }`;
const HOSTS = `{ hosts(first: 500) { edges { node { id } } } }`;

interface TeamDeletion {
  deleted: boolean;
  stoppingShards: number;
}

describeShardsApi('team, shard and host lifecycle', (api) => {
  const audits = (action: string, targetId: string) =>
    api.h.prisma.auditEvent.count({ where: { action, targetId } });
  const counted = async (action: string): Promise<number> => {
    const metric = await api.h.controlPlane.app
      .get(Registry)
      .getSingleMetric('gpushards_lifecycle_actions_total')
      ?.get();
    return metric?.values.find((v) => v.labels['action'] === action)?.value ?? 0;
  };
  const stoppedOn = async (hostId: string, shardId: string) => {
    await api.fleet.applyShardStateEvent(
      hostId,
      stateEvent(hostId, shardId, 'STOPPED', new Date()),
    );
  };

  it('startShard runs a STOPPED shard again through the queue, keeping its id, name and history', async () => {
    const { h, alpha, registerPool } = api;
    await registerPool('restart', ['restart-1']);
    const queue = h.controlPlane.app.get(QueueService);
    const shard = assertOk(
      await createShard(h, alpha.member, {
        name: 'again',
        memoryPerGpu: '10g',
        hostSelector: [{ key: 'pool', value: 'restart' }],
      }),
    ).createShard;
    assert.equal(
      assertOk(await h.graphql<{ startShard: ShardResult }>(START, { id: shard.id }, alpha.member))
        .startShard.state,
      'PLACED',
      'placed already: unchanged',
    );
    await h.graphql(STOP, { id: shard.id }, alpha.member);
    await stoppedOn('restart-1', shard.id);
    const before = await counted('shard.start');

    const started = assertOk(
      await h.graphql<{ startShard: ShardResult & { stoppedAt: string | null } }>(
        START,
        { id: shard.id },
        alpha.member,
      ),
    ).startShard;
    assert.equal(started.state, 'PENDING');
    assert.equal(started.name, 'again');
    assert.equal(started.stoppedAt, null, "the last run's end is cleared");
    assert.equal(await audits('shard.start', shard.id), 1);
    assert.equal(await counted('shard.start'), before + 1);
    assertError(await h.graphql(START, { id: shard.id }, alpha.viewer), 'FORBIDDEN');
    assertError(await h.graphql(START, { id: shard.id }, api.beta.member), 'NOT_FOUND');

    await queue.admitNow();
    const placed = await h.prisma.shard.findUniqueOrThrow({ where: { id: shard.id } });
    assert.equal(placed.state, 'PLACED');
    assert.equal(placed.hostId, 'restart-1');
    const history = await h.prisma.shardEvent.findMany({
      where: { shardId: shard.id, kind: 'STATE' },
      orderBy: { id: 'asc' },
    });
    assert.deepEqual(
      history.map((e) => e.state),
      ['PLACED', 'STOPPING', 'STOPPED', 'PENDING', 'PLACED'],
      'one history across both runs',
    );
    assert.equal(
      await h.prisma.shardGpu.count({ where: { shardId: shard.id } }),
      2,
      "both runs' reservations are kept",
    );
    assertOk(await h.graphql(START, { id: shard.id }, alpha.member), 'placed: unchanged');
    assert.equal(await audits('shard.start', shard.id), 1);
  });

  it('startShard runs an EXITED or FAILED shard again (the last run cleared) and refuses a STOPPING one', async () => {
    const { h, alpha, registerPool } = api;
    await registerPool('rerun', ['rerun-1']);
    const queue = h.controlPlane.app.get(QueueService);
    const selector = [{ key: 'pool', value: 'rerun' }];
    const crashed = assertOk(
      await createShard(h, alpha.member, { memoryPerGpu: '1g', hostSelector: selector }),
    ).createShard;
    await api.fleet.applyShardStateEvent(
      'rerun-1',
      stateEvent('rerun-1', crashed.id, 'EXITED', new Date(), { exitCode: 3 }),
    );
    const exited = await h.prisma.shard.findUniqueOrThrow({ where: { id: crashed.id } });
    assert.equal(exited.state, 'EXITED');
    assert.equal(exited.exitCode, 3);
    const again = assertOk(
      await h.graphql<{ startShard: ShardResult & { exitCode: number | null } }>(
        START,
        { id: crashed.id },
        alpha.member,
      ),
    ).startShard;
    assert.equal(again.state, 'PENDING');
    assert.equal(again.exitCode, null, "the last run's exit code is cleared");
    assert.equal(await audits('shard.start', crashed.id), 1);
    await queue.admitNow();
    assert.equal(
      (await h.prisma.shard.findUniqueOrThrow({ where: { id: crashed.id } })).state,
      'PLACED',
    );

    const broken = assertOk(
      await createShard(h, alpha.member, { memoryPerGpu: '1g', hostSelector: selector }),
    ).createShard;
    await api.fleet.applyShardStateEvent(
      'rerun-1',
      stateEvent('rerun-1', broken.id, 'FAILED', new Date(), { reason: 'image not found' }),
    );
    assert.equal(
      (await h.prisma.shard.findUniqueOrThrow({ where: { id: broken.id } })).state,
      'FAILED',
    );
    assert.equal(
      assertOk(await h.graphql<{ startShard: ShardResult }>(START, { id: broken.id }, alpha.member))
        .startShard.state,
      'PENDING',
    );
    const failedAgain = await h.prisma.shard.findUniqueOrThrow({ where: { id: broken.id } });
    assert.equal(failedAgain.failureReason, null, "the last run's failure reason is cleared");

    await queue.admitNow();
    await h.graphql(STOP, { id: broken.id }, alpha.member);
    const stopping = await h.prisma.shard.findUniqueOrThrow({ where: { id: broken.id } });
    assert.equal(stopping.state, 'STOPPING');
    const refused = await h.graphql(START, { id: broken.id }, alpha.member);
    assertError(refused, 'CONFLICT');
    assert.match(JSON.stringify(refused), /wait until it has stopped/);
    assert.equal(await audits('shard.start', broken.id), 1, 'a refused start is not audited');
  });

  it("startShard checks the team's quota again and refuses a DELETED shard", async () => {
    const { h, registerPool } = api;
    await registerPool('requota', ['requota-1']);
    const team = await createTestTeam(h, 'requota', {
      maxTotal: '10g',
      maxShards: 1,
      maxPerShard: '10g',
    });
    const selector = [{ key: 'pool', value: 'requota' }];
    const first = assertOk(
      await createShard(h, team.member, { memoryPerGpu: '10g', hostSelector: selector }),
    ).createShard;
    await h.graphql(STOP, { id: first.id }, team.member);
    await stoppedOn('requota-1', first.id);
    assertOk(await createShard(h, team.member, { memoryPerGpu: '10g', hostSelector: selector }));
    assertError(await h.graphql(START, { id: first.id }, team.member), 'QUOTA_EXCEEDED');
    const still = await h.prisma.shard.findUniqueOrThrow({ where: { id: first.id } });
    assert.equal(still.state, 'STOPPED', 'nothing written');
    assert.equal(await audits('shard.start', first.id), 0);
    await h.graphql(
      `mutation ($id: ID!) { deleteShard(id: $id) { id } }`,
      { id: first.id },
      team.member,
    );
    assertError(await h.graphql(START, { id: first.id }, team.member), 'CONFLICT');
  });

  it('renameTeam: a new unique name, audited; a taken or invalid name changes nothing', async () => {
    const { h } = api;
    const team = await createTestTeam(h, 'old-name');
    const renamed = assertOk(
      await h.graphql<{ renameTeam: { name: string } }>(RENAME, { id: team.id, name: 'new-name' }),
    ).renameTeam;
    assert.equal(renamed.name, 'new-name');
    assertError(await h.graphql(RENAME, { id: team.id, name: 'alpha' }), 'CONFLICT');
    assertError(await h.graphql(RENAME, { id: team.id, name: 'Bad Name' }), 'BAD_USER_INPUT');
    assertError(await h.graphql(RENAME, { id: team.id, name: 'x' }, team.member), 'FORBIDDEN');
    const row = await h.prisma.team.findUniqueOrThrow({ where: { id: team.id } });
    assert.equal(row.name, 'new-name');
    const audit = await h.prisma.auditEvent.findFirstOrThrow({
      where: { action: 'team.rename', targetId: team.id },
    });
    assert.deepEqual(audit.details, { from: 'old-name', to: 'new-name' });
    assertOk(await h.graphql(ME, {}, team.member), 'its tokens still work');
  });

  it('archiveTeam: its tokens are refused and it takes no new shards until unarchived; running shards stay', async () => {
    const { h, registerPool } = api;
    await registerPool('archive', ['archive-1']);
    const team = await createTestTeam(h, 'archived');
    const selector = [{ key: 'pool', value: 'archive' }];
    const running = assertOk(
      await createShard(h, team.member, { memoryPerGpu: '5g', hostSelector: selector }),
    ).createShard;
    const stopped = assertOk(
      await createShard(h, team.member, { memoryPerGpu: '5g', hostSelector: selector }),
    ).createShard;
    await h.graphql(STOP, { id: stopped.id }, team.member);
    await stoppedOn('archive-1', stopped.id);
    assertOk(await h.graphql(ME, {}, team.member));

    const archived = assertOk(
      await h.graphql<{ archiveTeam: { archivedAt: string | null } }>(ARCHIVE, { id: team.id }),
    ).archiveTeam;
    assert.ok(archived.archivedAt);
    assertError(await h.graphql(ME, {}, team.member), 'UNAUTHENTICATED', 'member token refused');
    assertError(await h.graphql(ME, {}, team.viewer), 'UNAUTHENTICATED', 'viewer token refused');
    assertError(
      await createShard(h, h.adminToken, {
        teamId: team.id,
        memoryPerGpu: '1g',
        hostSelector: selector,
      }),
      'CONFLICT',
      'no new shards, even from an admin',
    );
    assertError(await h.graphql(START, { id: stopped.id }), 'CONFLICT');
    const row = await h.prisma.shard.findUniqueOrThrow({ where: { id: running.id } });
    assert.equal(row.state, 'PLACED', 'what runs keeps running');

    assertOk(await h.graphql(UNARCHIVE, { id: team.id }));
    assertOk(await h.graphql(ME, {}, team.member), 'tokens work again');
    assertOk(await h.graphql(START, { id: stopped.id }, team.member));
    assert.equal(await audits('team.archive', team.id), 1);
    assert.equal(await audits('team.unarchive', team.id), 1);
  });

  it('deleteTeam: refused with live shards; drainFirst stops them, and once stopped the team is deleted with its history kept', async () => {
    const { h, commands, registerPool } = api;
    await registerPool('gone', ['gone-1']);
    const team = await createTestTeam(h, 'doomed');
    const selector = [{ key: 'pool', value: 'gone' }];
    const live = assertOk(
      await createShard(h, team.member, { memoryPerGpu: '5g', hostSelector: selector }),
    ).createShard;
    const liveBefore = await h.prisma.shard.count({ where: { teamId: team.id } });

    assertError(await h.graphql(DELETE_TEAM, { id: team.id }), 'CONFLICT');
    assert.equal(
      (await h.prisma.team.findUniqueOrThrow({ where: { id: team.id } })).deletedAt,
      null,
    );

    const draining = assertOk(
      await h.graphql<{ deleteTeam: TeamDeletion }>(DELETE_TEAM, { id: team.id, drain: true }),
    ).deleteTeam;
    assert.deepEqual(
      { deleted: draining.deleted, stopping: draining.stoppingShards },
      { deleted: false, stopping: 1 },
    );
    assert.equal(commands.forShard(live.id).at(-1)?.type, 'stop');
    assertError(
      await h.graphql(ME, {}, team.member),
      'UNAUTHENTICATED',
      'archived while it drains',
    );

    await stoppedOn('gone-1', live.id);
    const before = await counted('team.delete');
    const deleted = assertOk(
      await h.graphql<{ deleteTeam: TeamDeletion & { name: string } }>(DELETE_TEAM, {
        id: team.id,
        drain: true,
      }),
    ).deleteTeam;
    assert.deepEqual(
      { deleted: deleted.deleted, name: deleted.name },
      { deleted: true, name: 'doomed' },
    );
    assert.equal(await counted('team.delete'), before + 1);
    assert.equal(commands.forShard(live.id).at(-1)?.type, 'delete', 'its container goes');
    assertError(
      await h.graphql(`query ($id: ID!) { team(id: $id) { id } }`, { id: team.id }),
      'NOT_FOUND',
    );
    assertError(await h.graphql(DELETE_TEAM, { id: team.id }), 'NOT_FOUND');
    // Kept for accounting: the row, its shards (DELETED), reservations and audit trail.
    const row = await h.prisma.team.findUniqueOrThrow({ where: { id: team.id } });
    assert.ok(row.deletedAt);
    assert.equal(await h.prisma.shard.count({ where: { teamId: team.id } }), liveBefore);
    assert.equal(
      (await h.prisma.shard.findUniqueOrThrow({ where: { id: live.id } })).state,
      'DELETED',
    );
    assert.ok((await h.prisma.shardGpu.count({ where: { shardId: live.id } })) > 0);
    assert.equal(await h.prisma.apiToken.count({ where: { teamId: team.id, revokedAt: null } }), 0);
    // Its name is free again.
    await createTestTeam(h, 'doomed');
  });

  it('removeHost: refused until drained; then gone from the fleet and its agent refused', async () => {
    const { h, alpha, registerPool } = api;
    await registerPool('retire', ['retire-1']);
    const shard = assertOk(
      await createShard(h, alpha.member, {
        memoryPerGpu: '5g',
        hostSelector: [{ key: 'pool', value: 'retire' }],
      }),
    ).createShard;
    assertError(await h.graphql(REMOVE_HOST, { id: 'retire-1' }), 'CONFLICT', 'not drained');
    assertOk(await h.graphql(DRAIN_HOST, { id: 'retire-1' }));
    assertError(await h.graphql(REMOVE_HOST, { id: 'retire-1' }), 'CONFLICT', 'still stopping');
    await stoppedOn('retire-1', shard.id);
    assertError(await h.graphql(REMOVE_HOST, { id: 'retire-1' }, alpha.member), 'FORBIDDEN');

    const before = await counted('host.remove');
    const removed = assertOk(
      await h.graphql<{ removeHost: { state: string } }>(REMOVE_HOST, { id: 'retire-1' }),
    ).removeHost;
    assert.equal(removed.state, 'OFFLINE');
    assert.equal(await counted('host.remove'), before + 1);
    assert.equal(await audits('host.remove', 'retire-1'), 1);
    const hosts = assertOk(
      await h.graphql<{ hosts: { edges: { node: { id: string } }[] } }>(HOSTS),
    ).hosts.edges.map((e) => e.node.id);
    assert.ok(!hosts.includes('retire-1'));
    assertError(await h.graphql(`{ host(id: "retire-1") { id } }`), 'NOT_FOUND');
    // Its history stays: the shard still names it.
    assert.equal(
      (await h.prisma.shard.findUniqueOrThrow({ where: { id: shard.id } })).hostId,
      'retire-1',
    );

    // Its agent is refused: a registration is rejected (HOST_DISABLED) and changes nothing.
    // (The harness's agent link is a fake: the service that answers agents is made here.)
    const app = h.controlPlane.app;
    const messages = new AgentMessagesService(
      api.fleet,
      app.get(FenceService, { strict: false }),
      app.get(CapPolicies, { strict: false }),
      app.get(RemovedHosts, { strict: false }),
      app.get(ElasticService, { strict: false }),
      new Registry(),
      app.get(LOGGER, { strict: false }),
    );
    const reply = await messages.handle({
      subject: agentSubjects('retire-1').register,
      data: encodeMessage(
        registerRequestSchema,
        registerRequest('retire-1', { labels: { pool: 'retire' } }),
      ),
    });
    const decoded = decodeMessage(registerReplySchema, reply ?? '');
    assert.ok(decoded.ok && !decoded.message.accepted);
    assert.equal(
      decoded.ok && !decoded.message.accepted && decoded.message.error.code,
      'HOST_DISABLED',
    );
    const row = await h.prisma.host.findUniqueOrThrow({ where: { id: 'retire-1' } });
    assert.equal(row.state, 'OFFLINE', 'not brought back');
    assertError(await h.graphql(REMOVE_HOST, { id: 'retire-1' }), 'NOT_FOUND');
  });
});

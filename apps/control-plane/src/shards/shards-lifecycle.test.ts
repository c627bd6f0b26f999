import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { it } from 'node:test';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  MiB,
  reservedOn,
  shardRowCounts,
  stateEvent,
  type ShardResult,
} from '../testing/fleet-fixtures.js';
import { describeShardsApi, STOP, DELETE, RESIZE } from '../testing/shards-api-fixtures.js';

/**
 * A shard's life after createShard: stopShard, deleteShard and resizeShard.
 */
describeShardsApi('lifecycle', (api) => {
  it('stopShard: STOPPING and a stop command; released when the agent reports it stopped', async () => {
    const { h, fleet, commands, alpha, registerPool } = api;
    await registerPool('stop', ['stop-1']);
    const shard = assertOk(
      await createShard(h, alpha.member, {
        memoryPerGpu: '30g',
        hostSelector: [{ key: 'pool', value: 'stop' }],
      }),
    ).createShard;
    const gpu = shard.gpus[0]!.gpuUuid;
    const stopping = assertOk(
      await h.graphql<{ stopShard: ShardResult }>(STOP, { id: shard.id, grace: 5 }, alpha.member),
    ).stopShard;
    assert.equal(stopping.state, 'STOPPING');
    assert.equal(await reservedOn(h, gpu), 30 * GiB + 512 * MiB, 'still held while stopping');
    assert.deepEqual(commands.forShard(shard.id).at(-1), {
      type: 'stop',
      hostId: 'stop-1',
      shardId: shard.id,
      graceSeconds: 5,
    });
    assertOk(
      await h.graphql(STOP, { id: shard.id }, alpha.member),
      'stopping again changes nothing',
    );
    assert.equal(
      await h.prisma.auditEvent.count({ where: { action: 'shard.stop', targetId: shard.id } }),
      1,
    );
    await fleet.applyShardStateEvent(
      'stop-1',
      stateEvent('stop-1', shard.id, 'STOPPED', new Date()),
    );
    const stopped = await h.prisma.shard.findUniqueOrThrow({ where: { id: shard.id } });
    assert.equal(stopped.state, 'STOPPED');
    assert.ok(stopped.stoppedAt);
    assert.equal(await reservedOn(h, gpu), 0);
    assert.equal(
      await h.prisma.shardGpu.count({ where: { shardId: shard.id, releasedAt: null } }),
      0,
    );
    assertError(
      await h.graphql(STOP, { id: shard.id, grace: 601 }, alpha.member),
      'BAD_USER_INPUT',
    );
    assertError(await h.graphql(STOP, { id: randomUUID() }, alpha.member), 'NOT_FOUND');
  });

  it('deleteShard: DELETED, released, a delete command; deleting again changes nothing', async () => {
    const { h, commands, alpha, registerPool } = api;
    await registerPool('delete', ['delete-1']);
    const shard = assertOk(
      await createShard(h, alpha.member, {
        memoryPerGpu: '30g',
        hostSelector: [{ key: 'pool', value: 'delete' }],
      }),
    ).createShard;
    const deleted = assertOk(
      await h.graphql<{ deleteShard: ShardResult }>(DELETE, { id: shard.id }, alpha.member),
    ).deleteShard;
    assert.equal(deleted.state, 'DELETED');
    assert.equal(await reservedOn(h, shard.gpus[0]!.gpuUuid), 0);
    assert.ok(deleted.gpus[0]!.releasedAt);
    assert.equal(commands.forShard(shard.id).at(-1)?.type, 'delete');
    assertOk(await h.graphql(DELETE, { id: shard.id }, alpha.member));
    assert.equal(
      await h.prisma.auditEvent.count({ where: { action: 'shard.delete', targetId: shard.id } }),
      1,
    );
    assertError(await h.graphql(STOP, { id: shard.id }, alpha.member), 'CONFLICT');
    assertError(await h.graphql(RESIZE, { id: shard.id, size: '1g' }, alpha.member), 'CONFLICT');
  });

  it('resizeShard: grows and shrinks on the same GPUs; a misfit is NO_CAPACITY and a quota breach QUOTA_EXCEEDED, both writing nothing', async () => {
    const { h, commands, alpha, registerPool } = api;
    await registerPool('resize', ['resize-1'], 2, 40 * GiB);
    const sizer = await createTestTeam(h, 'sizer', {
      maxTotal: '60g',
      maxShards: 10,
      maxPerShard: '60g',
    });
    const selector = [{ key: 'pool', value: 'resize' }];
    const shard = assertOk(
      await createShard(h, sizer.member, {
        memoryPerGpu: '10g',
        gpuCount: 2,
        hostSelector: selector,
      }),
    ).createShard;
    const grown = assertOk(
      await h.graphql<{ resizeShard: ShardResult }>(
        RESIZE,
        { id: shard.id, size: '20g' },
        sizer.member,
      ),
    ).resizeShard;
    assert.equal(grown.memoryPerGpu.bytes, String(20 * GiB));
    assert.equal(grown.limitPerGpu.bytes, String(20 * GiB + 512 * MiB));
    assert.equal(grown.version, shard.version + 1);
    for (const gpu of grown.gpus) {
      assert.equal(gpu.reserved.bytes, String(20 * GiB + 512 * MiB));
      assert.equal(await reservedOn(h, gpu.gpuUuid), 20 * GiB + 512 * MiB);
    }
    const intervals = await h.prisma.shardGpu.findMany({
      where: { shardId: shard.id },
      orderBy: { reservedAt: 'asc' },
    });
    assert.equal(intervals.length, 4, 'each GPU: the old interval closed, a new one open');
    assert.equal(intervals.filter((i) => i.releasedAt === null).length, 2);
    assert.deepEqual(commands.forShard(shard.id).at(-1), {
      type: 'resize',
      hostId: 'resize-1',
      shardId: shard.id,
      gpus: grown.gpus.map((g) => ({ uuid: g.gpuUuid, limitBytes: 20 * GiB + 512 * MiB })),
    });
    const other = assertOk(
      await createShard(h, alpha.member, { memoryPerGpu: '15g', hostSelector: selector }),
    ).createShard;
    const before = await shardRowCounts(h);
    const misfit = await h.graphql(RESIZE, { id: shard.id, size: '25g' }, sizer.member);
    assertError(misfit, 'NO_CAPACITY');
    assert.match(
      misfit.errors![0]!.message,
      /needs 5 GiB more on each of its GPUs; #\d has 4 GiB free/,
    );
    const quota = await h.graphql(RESIZE, { id: shard.id, size: '31g' }, sizer.member);
    assertError(quota, 'QUOTA_EXCEEDED');
    assert.match(quota.errors![0]!.message, /62 GiB > limit 60 GiB/);
    assertError(
      await h.graphql(RESIZE, { id: shard.id, size: '10%' }, sizer.member),
      'BAD_USER_INPUT',
    );
    // The agent reported 12 GiB in use on one GPU: a cap under it is refused.
    await h.prisma.shardGpu.updateMany({
      where: { shardId: shard.id, gpuUuid: grown.gpus[0]!.gpuUuid, releasedAt: null },
      data: { usedBytes: BigInt(12 * GiB) },
    });
    const belowUsage = await h.graphql(RESIZE, { id: shard.id, size: '5g' }, sizer.member);
    assertError(belowUsage, 'CONFLICT');
    assert.match(
      belowUsage.errors![0]!.message,
      /holds 12 GiB on GPU .*free memory in the shard first/,
    );
    await h.prisma.shardGpu.updateMany({
      where: { shardId: shard.id, releasedAt: null },
      data: { usedBytes: 0n },
    });
    assert.deepEqual(await shardRowCounts(h), before);
    const shrunk = assertOk(
      await h.graphql<{ resizeShard: ShardResult }>(
        RESIZE,
        { id: shard.id, size: '5g' },
        sizer.member,
      ),
    ).resizeShard;
    assert.equal(
      await reservedOn(h, shrunk.gpus[0]!.gpuUuid),
      5 * GiB +
        512 * MiB +
        (other.gpus[0]!.gpuUuid === shrunk.gpus[0]!.gpuUuid ? 15 * GiB + 512 * MiB : 0),
    );
    assert.equal(
      await h.prisma.auditEvent.count({ where: { action: 'shard.resize', targetId: shard.id } }),
      2,
    );
  });
});

import assert from 'node:assert/strict';
import { it } from 'node:test';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  errorCode,
  GiB,
  gpuUuidOf,
  MiB,
  reservedOn,
  shardRowCounts,
  type ShardResult,
} from '../testing/fleet-fixtures.js';
import { describeShardsApi, SHARD, RESIZE, INJECTION } from '../testing/shards-api-fixtures.js';
import { DesiredShards } from '../fleet/desired-shards.js';

/**
 * createShard through the API: what it reserves and writes, placement policy, idempotency,
 * concurrent calls decided in arrival order, GPUs taken behind the cache, and a launch the agent
 * link cannot deliver.
 */
describeShardsApi('create', (api) => {
  it('createShard reserves request + context overhead on each GPU, writes the shard, its audit event and a launch command', async () => {
    const { h, commands, alpha, registerPool } = api;
    await registerPool('create', ['create-1']);
    const response = await createShard(h, alpha.member, {
      name: 'train-7b',
      memoryPerGpu: '12g',
      gpuCount: 2,
      env: [{ name: 'EPOCHS', value: INJECTION }],
      command: ['python', 'train.py'],
      hostSelector: [{ key: 'pool', value: 'create' }],
    });
    const shard = assertOk(response).createShard;
    assert.equal(shard.state, 'PLACED');
    assert.equal(shard.teamId, alpha.id, "a member's shard is for its own team");
    assert.equal(shard.hostId, 'create-1');
    assert.equal(shard.memoryPerGpu.bytes, String(12 * GiB));
    assert.equal(shard.limitPerGpu.bytes, String(12 * GiB + 512 * MiB));
    assert.deepEqual(shard.env, [{ name: 'EPOCHS', value: INJECTION }], 'stored literally');
    assert.deepEqual(
      shard.gpus.map((g) => [g.gpuUuid, g.reserved.bytes, g.releasedAt]),
      [0, 1].map((i) => [gpuUuidOf('create-1', i), String(12 * GiB + 512 * MiB), null]),
    );
    for (const i of [0, 1]) {
      assert.equal(await reservedOn(h, gpuUuidOf('create-1', i)), 12 * GiB + 512 * MiB);
    }
    const audit = await h.prisma.auditEvent.findFirstOrThrow({
      where: { action: 'shard.create', targetId: shard.id },
    });
    assert.equal(audit.teamId, alpha.id);
    assert.equal(audit.actorRole, 'MEMBER');
    const launch = commands.forShard(shard.id);
    assert.equal(launch.length, 1);
    assert.equal(launch[0]!.type, 'launch');
    assert.equal(launch[0]!.hostId, 'create-1');
    if (launch[0]!.type === 'launch') {
      assert.deepEqual(launch[0]!.spec.gpus, [
        { uuid: gpuUuidOf('create-1', 0), limitBytes: 12 * GiB + 512 * MiB },
        { uuid: gpuUuidOf('create-1', 1), limitBytes: 12 * GiB + 512 * MiB },
      ]);
      assert.deepEqual(launch[0]!.spec.command, ['python', 'train.py']);
      assert.equal(launch[0]!.spec.contextOverheadBytes, 512 * MiB);
    }
    const fetched = assertOk(
      await h.graphql<{ shard: ShardResult & { team: { id: string }; host: { id: string } } }>(
        SHARD,
        { id: shard.id },
        alpha.viewer,
      ),
    ).shard;
    assert.equal(fetched.team.id, alpha.id);
    assert.equal(fetched.host.id, 'create-1');
  });

  it('binpack fills the fullest GPU that fits; spread takes the emptiest', async () => {
    const { h, alpha, registerPool } = api;
    await registerPool('policy', ['policy-1']);
    const selector = [{ key: 'pool', value: 'policy' }];
    const first = assertOk(
      await createShard(h, alpha.member, { hostSelector: selector, memoryPerGpu: '10g' }),
    ).createShard;
    const packed = assertOk(
      await createShard(h, alpha.member, { hostSelector: selector, memoryPerGpu: '10g' }),
    ).createShard;
    assert.equal(packed.gpus[0]!.gpuUuid, first.gpus[0]!.gpuUuid);
    const spread = assertOk(
      await createShard(h, alpha.member, {
        hostSelector: selector,
        memoryPerGpu: '10g',
        placementPolicy: 'SPREAD',
      }),
    ).createShard;
    assert.notEqual(spread.gpus[0]!.gpuUuid, first.gpus[0]!.gpuUuid);
  });

  it('idempotency: a retry returns the first shard, also when retries race; another request under the key is a CONFLICT', async () => {
    const { h, alpha, beta, registerPool } = api;
    await registerPool('idem', ['idem-1']);
    const input = {
      idempotencyKey: 'job-42',
      memoryPerGpu: '2g',
      hostSelector: [{ key: 'pool', value: 'idem' }],
    };
    const first = assertOk(await createShard(h, alpha.member, input)).createShard;
    const again = assertOk(await createShard(h, alpha.member, input)).createShard;
    assert.equal(again.id, first.id);
    const racing = await Promise.all(
      Array.from({ length: 12 }, () =>
        createShard(h, alpha.member, { ...input, idempotencyKey: 'job-43' }),
      ),
    );
    const ids = new Set(racing.map((r) => assertOk(r).createShard.id));
    assert.equal(ids.size, 1, 'every racer got the same shard');
    assert.equal(await h.prisma.shard.count({ where: { idempotencyKey: 'job-43' } }), 1);
    assert.equal(
      await h.prisma.auditEvent.count({
        where: { action: 'shard.create', targetId: [...ids][0] },
      }),
      1,
    );
    const before = await shardRowCounts(h);
    assertError(await createShard(h, alpha.member, { ...input, memoryPerGpu: '3g' }), 'CONFLICT');
    assert.deepEqual(await shardRowCounts(h), before);
    // Resized since, the shard differs from what the first call asked for; a resent first
    // call is still the same request (compared with what it asked, not with the shard now).
    assertOk(await h.graphql(RESIZE, { id: first.id, size: '3g' }, alpha.member));
    const resized = await shardRowCounts(h);
    const afterResize = assertOk(await createShard(h, alpha.member, input)).createShard;
    assert.equal(afterResize.id, first.id);
    assert.equal(afterResize.memoryPerGpu.bytes, String(3 * GiB), 'the shard as it is now');
    assertError(await createShard(h, alpha.member, { ...input, memoryPerGpu: '3g' }), 'CONFLICT');
    assert.deepEqual(await shardRowCounts(h), resized);
    // The key is per team: another team may use it.
    const other = assertOk(await createShard(h, beta.member, input)).createShard;
    assert.notEqual(other.id, first.id);
  });

  it('concurrent calls share a transaction and are decided in arrival order: exactly the quota is placed', async () => {
    const { h, alpha, registerPool } = api;
    await registerPool('burst', ['burst-1', 'burst-2']);
    const burst = await createTestTeam(h, 'burst', { maxShards: 3 });
    const before = await shardRowCounts(h);
    const responses = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        createShard(h, burst.member, {
          name: `burst-${i}`,
          memoryPerGpu: '1g',
          hostSelector: [{ key: 'pool', value: 'burst' }],
        }),
      ),
    );
    const codes = responses.map((r) => errorCode(r) ?? 'OK').sort();
    assert.deepEqual(codes, [...Array(3).fill('OK'), ...Array(7).fill('QUOTA_EXCEEDED')]);
    const after = await shardRowCounts(h);
    assert.equal(after.shards - before.shards, 3);
    assert.equal(after.reservations - before.reservations, 3);
    assert.equal(await h.prisma.shard.count({ where: { teamId: burst.id } }), 3);
    // Racing calls under one key for different shards: one is placed, the others CONFLICT.
    const keyed = await Promise.all(
      ['1g', '2g', '1g'].map((memoryPerGpu) =>
        createShard(h, alpha.member, {
          idempotencyKey: 'burst-key',
          memoryPerGpu,
          hostSelector: [{ key: 'pool', value: 'burst' }],
        }),
      ),
    );
    const placed = keyed.filter((r) => errorCode(r) === undefined);
    assert.ok(placed.length >= 1, JSON.stringify(keyed.map(errorCode)));
    assert.equal(new Set(placed.map((r) => assertOk(r).createShard.id)).size, 1);
    for (const r of keyed) assert.ok(errorCode(r) === undefined || errorCode(r) === 'CONFLICT');
    assert.equal(await h.prisma.shard.count({ where: { idempotencyKey: 'burst-key' } }), 1);
  });

  it('GPUs taken behind the cache (another control plane): placed on another GPU in the same call, NO_CAPACITY once none is left', async () => {
    const { h, alpha, registerPool } = api;
    await registerPool('behind', ['behind-1']);
    const [first, second] = [gpuUuidOf('behind-1', 0), gpuUuidOf('behind-1', 1)];
    // Binpack on two empty GPUs takes #0: take it in the database only.
    await h.prisma.$executeRaw`UPDATE gpu SET reserved_bytes = total_bytes WHERE uuid = ${first}`;
    const input = { memoryPerGpu: '8g', hostSelector: [{ key: 'pool', value: 'behind' }] };
    const shard = assertOk(await createShard(h, alpha.member, input)).createShard;
    assert.deepEqual(
      shard.gpus.map((gpu) => gpu.gpuUuid),
      [second],
    );
    assert.equal(await reservedOn(h, first), 80 * GiB, 'the taken GPU was given nothing');
    await h.prisma.$executeRaw`UPDATE gpu SET reserved_bytes = total_bytes WHERE uuid = ${second}`;
    const before = await shardRowCounts(h);
    assertError(await createShard(h, alpha.member, input), 'NO_CAPACITY');
    assert.deepEqual(await shardRowCounts(h), before, 'nothing written');
    // Back to what the live reservations hold, for the invariant checks of later tests.
    await h.prisma.$executeRaw`
      UPDATE gpu SET reserved_bytes = coalesce((SELECT sum(reserved_bytes) FROM shard_gpu
                                                 WHERE gpu_uuid = gpu.uuid AND released_at IS NULL), 0)
       WHERE host_id = 'behind-1'`;
    assert.equal(await reservedOn(h, second), Number(shard.limitPerGpu.bytes));
  });

  it('a command the agent link cannot deliver leaves the shard PLACED for reconciliation', async () => {
    const { h, commands, alpha, registerPool } = api;
    await registerPool('unreachable', ['unreachable-1']);
    commands.failure = new Error('no route to agent');
    try {
      const shard = assertOk(
        await createShard(h, alpha.member, {
          hostSelector: [{ key: 'pool', value: 'unreachable' }],
        }),
      ).createShard;
      assert.equal(shard.state, 'PLACED');
      const desired = await h.controlPlane.app
        .get(DesiredShards)
        .desiredShardsFor('unreachable-1', true);
      assert.deepEqual(
        desired.desired.map((spec) => spec.shardId),
        [shard.id],
      );
    } finally {
      commands.failure = undefined;
    }
  });
});

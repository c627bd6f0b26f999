import assert from 'node:assert/strict';
import { it } from 'node:test';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  shardRowCounts,
} from '../testing/fleet-fixtures.js';
import {
  describeShardsApi,
  SHARD,
  SHARDS,
  STOP,
  DELETE,
  RESIZE,
  PREVIEW,
  INJECTION,
} from '../testing/shards-api-fixtures.js';

/**
 * What the shard API refuses (bad input, no capacity, quota, malformed ids) and that a refusal
 * writes nothing; last, the placement metrics that this file's calls leave.
 */
describeShardsApi('refusals', (api) => {
  it('bad input is BAD_USER_INPUT naming the field, and writes nothing', async () => {
    const { h, alpha } = api;
    const before = await shardRowCounts(h);
    const cases: [string, Record<string, unknown>, string, RegExp?][] = [
      ['malformed size', { memoryPerGpu: '12gb' }, 'input.memoryPerGpu', /ambiguous/],
      ['negative size', { memoryPerGpu: '-1g' }, 'input.memoryPerGpu'],
      ['zero size', { memoryPerGpu: '0' }, 'input.memoryPerGpu'],
      ['not a size', { memoryPerGpu: 'lots' }, 'input.memoryPerGpu'],
      ['percent', { memoryPerGpu: '50%' }, 'input.memoryPerGpu', /percentages/],
      ['huge size', { memoryPerGpu: '99999999t' }, 'input.memoryPerGpu'],
      ['zero GPUs', { gpuCount: 0 }, 'input.gpuCount'],
      ['more GPUs than the protocol allows', { gpuCount: 65 }, 'input.gpuCount'],
      ['more GPUs than any host has', { gpuCount: 5 }, 'input.gpuCount', /at most 4/],
      [
        'unknown GPU model',
        { gpuModelInclude: ['H200'] },
        'input.gpuModelInclude',
        /no GPU in the fleet/,
      ],
      ['model excluded everywhere', { gpuModelExclude: ['NVIDIA'] }, 'input.gpuModelExclude'],
      [
        'reserved env key',
        { env: [{ name: 'LD_PRELOAD', value: '/x.so' }] },
        'input.env',
        /LD_PRELOAD/,
      ],
      [
        'reserved env prefixes',
        {
          env: [
            { name: 'NVIDIA_VISIBLE_DEVICES', value: 'all' },
            { name: 'GPUSHARDS_X', value: '1' },
            { name: 'CUDA_DEVICE_MEMORY_LIMIT_0', value: '1g' },
          ],
        },
        'input.env',
        /NVIDIA_VISIBLE_DEVICES, GPUSHARDS_X, CUDA_DEVICE_MEMORY_LIMIT_0/,
      ],
      ['env name syntax', { env: [{ name: 'A-B', value: '1' }] }, 'input.env'],
      [
        'duplicate env',
        {
          env: [
            { name: 'A', value: '1' },
            { name: 'A', value: '2' },
          ],
        },
        'input.env[1].name',
      ],
      [
        '200 KiB image (the body limit is 256 KiB)',
        { image: 'a'.repeat(200 * 1024) },
        'input.image',
        /at most 512/,
      ],
      ['image syntax', { image: 'Ubuntu:Latest' }, 'input.image'],
      ['image injection', { image: INJECTION }, 'input.image'],
      ['empty image', { image: '' }, 'input.image'],
      ['name injection', { name: INJECTION }, 'input.name'],
      ['long name', { name: 'n'.repeat(64) }, 'input.name'],
      [
        'selector key injection',
        { hostSelector: [{ key: INJECTION, value: 'a' }] },
        'input.hostSelector[0].key',
      ],
      ['teamId injection', { teamId: INJECTION }, 'input.teamId'],
      ['idempotency key with spaces', { idempotencyKey: 'a b' }, 'input.idempotencyKey'],
      ['command with NUL', { command: ['sh', 'a\u0000b'] }, 'input.command'],
      ['command with a lone surrogate', { command: ['sh', 'a\ud800'] }, 'input.command[1]'],
      [
        'env value with a lone surrogate',
        { env: [{ name: 'A', value: '\udc00' }] },
        'input.env[0].value',
        /unpaired surrogate/,
      ],
      [
        'selector value with a lone surrogate',
        { hostSelector: [{ key: 'zone', value: 'x\ud800y' }] },
        'input.hostSelector[0].value',
      ],
      ['model term injection', { gpuModelInclude: [INJECTION] }, 'input.gpuModelInclude[0]'],
    ];
    for (const [what, input, field, message] of cases) {
      const response = await createShard(h, alpha.member, input);
      assertError(response, 'BAD_USER_INPUT', what);
      const problems = response.errors![0]!.extensions!['problems'] as {
        field: string;
        message: string;
      }[];
      assert.ok(
        problems.some(
          (p) => p.field === field && (message === undefined || message.test(p.message)),
        ),
        `${what}: ${JSON.stringify(problems).slice(0, 500)}`,
      );
      assert.ok(JSON.stringify(response).length < 10_000, `${what}: long input is not echoed`);
    }
    assert.deepEqual(await shardRowCounts(h), before);
  });

  it("a selector value full of SQL matches no host: NO_CAPACITY with every host's reason, nothing written", async () => {
    const { h, alpha } = api;
    const before = await shardRowCounts(h);
    const response = await createShard(h, alpha.member, {
      hostSelector: [{ key: 'pool', value: INJECTION }],
    });
    assertError(response, 'NO_CAPACITY');
    const hosts = response.errors![0]!.extensions!['hosts'] as {
      hostId: string;
      reason: string;
    }[];
    const registered = await h.prisma.host.count();
    assert.equal(hosts.length, registered, 'one reason per host');
    assert.ok(
      hosts.every((host) => /label "pool"/.test(host.reason)),
      JSON.stringify(hosts),
    );
    assert.deepEqual(await shardRowCounts(h), before);
    assert.equal(await h.prisma.host.count(), registered);
  });

  it('NO_CAPACITY names each host and its numbers when nothing fits', async () => {
    const { h, alpha, registerPool } = api;
    await registerPool('full', ['full-1']);
    const before = await shardRowCounts(h);
    const response = await createShard(h, alpha.member, {
      memoryPerGpu: '80g',
      hostSelector: [{ key: 'pool', value: 'full' }],
    });
    assertError(response, 'NO_CAPACITY');
    const hosts = response.errors![0]!.extensions!['hosts'] as {
      hostId: string;
      reason: string;
    }[];
    const full = hosts.find((host) => host.hostId === 'full-1');
    assert.match(
      full?.reason ?? '',
      /needs 1 GPU with 80.5 GiB free each, has 0 \(free: #0 80 GiB, #1 80 GiB\)/,
    );
    assert.deepEqual(await shardRowCounts(h), before);
  });

  it('QUOTA_EXCEEDED names the limit and both numbers; nothing written', async () => {
    const { h, registerPool } = api;
    await registerPool('quota', ['quota-1']);
    const selector = [{ key: 'pool', value: 'quota' }];
    const small = await createTestTeam(h, 'small', {
      maxTotal: '20g',
      maxShards: 2,
      maxPerShard: '16g',
      maxGpusPerShard: 1,
    });
    assertOk(await createShard(h, small.member, { memoryPerGpu: '12g', hostSelector: selector }));
    const before = await shardRowCounts(h);
    const total = await createShard(h, small.member, {
      memoryPerGpu: '10g',
      hostSelector: selector,
    });
    assertError(total, 'QUOTA_EXCEEDED');
    assert.match(
      total.errors![0]!.message,
      /12 GiB held \+ 10 GiB requested = 22 GiB > limit 20 GiB/,
    );
    assert.deepEqual(
      { ...total.errors![0]!.extensions, code: undefined },
      {
        limit: 'maxTotalBytes',
        requested: 10 * GiB,
        limitValue: 20 * GiB,
        current: 12 * GiB,
        code: undefined,
      },
    );
    const perShard = await createShard(h, small.member, {
      memoryPerGpu: '17g',
      hostSelector: selector,
    });
    assertError(perShard, 'QUOTA_EXCEEDED');
    assert.match(perShard.errors![0]!.message, /17 GiB > limit 16 GiB per shard/);
    const gpus = await createShard(h, small.member, {
      memoryPerGpu: '1g',
      gpuCount: 2,
      hostSelector: selector,
    });
    assertError(gpus, 'QUOTA_EXCEEDED');
    assert.match(gpus.errors![0]!.message, /2 requested > limit 1/);
    assertOk(await createShard(h, small.member, { memoryPerGpu: '8g', hostSelector: selector }));
    const count = await createShard(h, small.member, {
      memoryPerGpu: '1m',
      hostSelector: selector,
    });
    assertError(count, 'QUOTA_EXCEEDED');
    assert.match(count.errors![0]!.message, /2 held \+ 1 requested = 3 > limit 2/);
    const after = await shardRowCounts(h);
    assert.equal(after.shards, before.shards + 1);
    const none = await createTestTeam(h, 'no-policy', null);
    const refused = await createShard(h, none.member, { hostSelector: selector });
    assertError(refused, 'QUOTA_EXCEEDED');
  });

  it('malformed ids, cursors and injection strings are BAD_USER_INPUT everywhere; nothing written', async () => {
    const { h, alpha } = api;
    const before = await shardRowCounts(h);
    const hostsBefore = await h.prisma.host.findMany({ orderBy: { id: 'asc' } });
    const cases: [string, Record<string, unknown>][] = [
      [SHARD, { id: INJECTION }],
      [STOP, { id: INJECTION }],
      [DELETE, { id: 'nope' }],
      [RESIZE, { id: INJECTION, size: '1g' }],
      [SHARDS, { hostId: 'ok', after: INJECTION }],
      [SHARDS, { first: 0 }],
      [PREVIEW, { input: { memoryPerGpu: INJECTION } }],
      [PREVIEW, { input: { memoryPerGpu: '1g', teamId: INJECTION } }],
      [`query ($id: ID!) { host(id: $id) { id } }`, { id: INJECTION }],
      [`query ($h: ID) { gpus(hostId: $h) { edges { node { uuid } } } }`, { h: INJECTION }],
      [`query ($a: String) { hosts(after: $a) { edges { node { id } } } }`, { a: INJECTION }],
      [`mutation ($id: ID!) { drainHost(id: $id) { id } }`, { id: INJECTION }],
    ];
    for (const [query, variables] of cases) {
      const token = query.includes('drainHost') ? h.adminToken : alpha.member;
      assertError(
        await h.graphql(query, variables, token),
        'BAD_USER_INPUT',
        JSON.stringify(variables),
      );
    }
    assert.deepEqual(await shardRowCounts(h), before);
    assert.deepEqual(await h.prisma.host.findMany({ orderBy: { id: 'asc' } }), hostsBefore);
  });

  it('metrics: the placement histogram and hosts by state', async () => {
    const { h } = api;
    // Counts what the tests above in this file did: placements, quota and capacity refusals.
    const text = await (await fetch(`${h.controlPlane.url}/metrics`)).text();
    assert.match(text, /gpushards_placement_duration_seconds_count\{result="placed"\} [1-9]/);
    assert.match(
      text,
      /gpushards_placement_duration_seconds_count\{result="quota_exceeded"\} [1-9]/,
    );
    assert.match(text, /gpushards_placement_duration_seconds_count\{result="no_capacity"\} [1-9]/);
    assert.match(text, /gpushards_hosts\{state="ONLINE"\} [1-9]/);
  });
});

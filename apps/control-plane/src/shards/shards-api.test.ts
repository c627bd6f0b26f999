import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { createClient } from 'graphql-ws';
import { WebSocket } from 'ws';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { ShardEventBus } from '../events/shard-event-bus.js';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import {
  assertError,
  assertOk,
  createShard,
  createTestTeam,
  errorCode,
  GiB,
  gpuUuidOf,
  MiB,
  registerRequest,
  reservedOn,
  SHARD_FIELDS,
  shardRowCounts,
  stateEvent,
  type ShardResult,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';

/** Shards through HTTP GraphQL (and graphql-ws), on PostgreSQL and on PGlite. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const SHARD = `query ($id: ID!) { shard(id: $id) { ${SHARD_FIELDS} team { id name } host { id name } } }`;
const SHARDS = `query ($teamId: ID, $states: [ShardState!], $hostId: ID, $first: Int, $after: String) {
  shards(teamId: $teamId, states: $states, hostId: $hostId, first: $first, after: $after) {
    edges { cursor node { id name state teamId hostId } }
    pageInfo { hasNextPage hasPreviousPage endCursor }
  }
}`;
const STOP = `mutation ($id: ID!, $grace: Int) { stopShard(id: $id, graceSeconds: $grace) { ${SHARD_FIELDS} } }`;
const DELETE = `mutation ($id: ID!) { deleteShard(id: $id) { ${SHARD_FIELDS} } }`;
const RESIZE = `mutation ($id: ID!, $size: String!) { resizeShard(id: $id, memoryPerGpu: $size) { ${SHARD_FIELDS} } }`;
const PREVIEW = `query ($input: PlacementInput!) {
  placementPreview(input: $input) {
    fits hostId hostName gpuUuids reservedPerGpu { bytes human } message quotaProblem
    hosts { hostId hostName kind reason }
  }
}`;
const HOST_SHARDS = `query ($id: ID!) { host(id: $id) { id shards { edges { node { id teamId } } } } }`;

const INJECTION = "x'; DROP TABLE shard; --";

for (const kind of TEST_DATABASE_KINDS) {
  describe(`shards on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    const commands = new FakeShardCommands();
    let alpha: TestTeam;
    let beta: TestTeam;

    /** A host of its own for a test, reachable with hostSelector { pool: <pool> }. */
    async function registerPool(pool: string, hostIds: string[], gpus = 2, gpuBytes = 80 * GiB) {
      for (const hostId of hostIds) {
        await fleet.registerHost(registerRequest(hostId, { gpus, gpuBytes, labels: { pool } }));
      }
    }

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { shardCommands: commands },
      });
      fleet = h.controlPlane.app.get(AgentReportsService);
      // The largest host has 4 GPUs; models: H100 and L4.
      await fleet.registerHost(
        registerRequest('base-l4', {
          gpus: 4,
          gpuBytes: 24 * GiB,
          model: 'NVIDIA L4',
          labels: { pool: 'l4' },
        }),
      );
      alpha = await createTestTeam(h, 'alpha');
      beta = await createTestTeam(h, 'beta');
    });
    after(async () => {
      await h?.close();
    });

    it('createShard reserves request + context overhead on each GPU, writes the shard, its audit event and a launch command', async () => {
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

    it('who may create for which team: admins must name one, members only their own, viewers not at all', async () => {
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

    it('bad input is BAD_USER_INPUT naming the field, and writes nothing', async () => {
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

    it('idempotency: a retry returns the first shard, also when retries race; another request under the key is a CONFLICT', async () => {
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
      await h.prisma
        .$executeRaw`UPDATE gpu SET reserved_bytes = total_bytes WHERE uuid = ${second}`;
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

    it('team isolation: another team cannot see, list, stop, resize or delete a shard', async () => {
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
        await h.graphql<{ shards: { edges: unknown[] } }>(
          SHARDS,
          { teamId: alpha.id },
          beta.member,
        ),
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

    it('shards: filters by team, state and host; pages newest first', async () => {
      await registerPool('list', ['list-1', 'list-2']);
      const lister = await createTestTeam(h, 'lister');
      const created: string[] = [];
      for (let i = 0; i < 3; i++) {
        created.push(
          assertOk(
            await createShard(h, lister.member, {
              hostSelector: [{ key: 'pool', value: 'list' }],
              memoryPerGpu: '70g',
            }),
          ).createShard.id,
        );
      }
      type Page = {
        shards: {
          edges: { cursor: string; node: { id: string; hostId: string; state: string } }[];
          pageInfo: { hasNextPage: boolean; endCursor: string };
        };
      };
      const page1 = assertOk(await h.graphql<Page>(SHARDS, { first: 2 }, lister.viewer)).shards;
      assert.deepEqual(
        page1.edges.map((e) => e.node.id),
        [created[2], created[1]],
      );
      assert.equal(page1.pageInfo.hasNextPage, true);
      const page2 = assertOk(
        await h.graphql<Page>(SHARDS, { first: 2, after: page1.pageInfo.endCursor }, lister.viewer),
      ).shards;
      assert.deepEqual(
        page2.edges.map((e) => e.node.id),
        [created[0]],
      );
      assert.equal(page2.pageInfo.hasNextPage, false);
      const onHost = assertOk(
        await h.graphql<Page>(SHARDS, { hostId: 'list-2' }, lister.viewer),
      ).shards;
      assert.equal(onHost.edges.length, 1);
      assertOk(await h.graphql(STOP, { id: created[0] }, lister.member));
      const stopping = assertOk(
        await h.graphql<Page>(SHARDS, { states: ['STOPPING'] }, lister.viewer),
      ).shards;
      assert.deepEqual(
        stopping.edges.map((e) => e.node.id),
        [created[0]],
      );
      const byAdmin = assertOk(
        await h.graphql<Page>(SHARDS, { teamId: lister.id, first: 10 }),
      ).shards;
      assert.equal(byAdmin.edges.length, 3);
      assertError(await h.graphql(SHARDS, { after: 'garbage' }, lister.viewer), 'BAD_USER_INPUT');
      assertError(await h.graphql(SHARDS, { teamId: INJECTION }, lister.viewer), 'BAD_USER_INPUT');
    });

    it('a page of shards gives each shard its own GPUs (read together for the page), as shard(id) does', async () => {
      await registerPool('gpu-list', ['gpu-list-1', 'gpu-list-2'], 4);
      const team = await createTestTeam(h, 'gpu-lister');
      const ids: string[] = [];
      for (const gpuCount of [2, 1, 3, 4]) {
        ids.push(
          assertOk(
            await createShard(h, team.member, {
              hostSelector: [{ key: 'pool', value: 'gpu-list' }],
              memoryPerGpu: '10g',
              gpuCount,
            }),
          ).createShard.id,
        );
      }
      type Gpus = { index: number; gpuUuid: string; reserved: { bytes: string } }[];
      const page = assertOk(
        await h.graphql<{
          shards: { edges: { node: { id: string; gpuCount: number; gpus: Gpus } }[] };
        }>(
          `query ($teamId: ID) { shards(teamId: $teamId) { edges { node { id gpuCount gpus { index gpuUuid reserved { bytes } } } } } }`,
          { teamId: team.id },
        ),
      ).shards.edges.map((edge) => edge.node);
      assert.deepEqual(
        page.map((shard) => shard.id),
        [...ids].reverse(),
      );
      for (const shard of page) {
        assert.equal(shard.gpus.length, shard.gpuCount, shard.id);
        const alone = assertOk(
          await h.graphql<{ shard: { gpus: Gpus } }>(
            `query ($id: ID!) { shard(id: $id) { gpus { index gpuUuid reserved { bytes } } } }`,
            { id: shard.id },
          ),
        ).shard.gpus;
        assert.deepEqual(shard.gpus, alone, shard.id);
        assert.deepEqual(
          shard.gpus.map((gpu) => gpu.index),
          [...shard.gpus.map((gpu) => gpu.index)].sort((a, b) => a - b),
        );
      }
    });

    it('placementPreview: where it would go, or every host with its reason; nothing reserved', async () => {
      await registerPool('preview', ['preview-1']);
      const before = await shardRowCounts(h);
      const fits = assertOk(
        await h.graphql<{ placementPreview: Record<string, unknown> }>(
          PREVIEW,
          {
            input: {
              memoryPerGpu: '20g',
              gpuCount: 2,
              hostSelector: [{ key: 'pool', value: 'preview' }],
            },
          },
          alpha.viewer,
        ),
      ).placementPreview;
      assert.equal(fits['fits'], true);
      assert.equal(fits['hostId'], 'preview-1');
      assert.deepEqual(fits['reservedPerGpu'], {
        bytes: String(20 * GiB + 512 * MiB),
        human: '20.5 GiB',
      });
      assert.equal(fits['quotaProblem'], null);
      const no = assertOk(
        await h.graphql<{
          placementPreview: {
            fits: boolean;
            hosts: { hostId: string; kind: string; reason: string }[];
          };
        }>(
          PREVIEW,
          { input: { memoryPerGpu: '79.75g', gpuCount: 2, gpuModelInclude: ['H100'] } },
          alpha.viewer,
        ),
      ).placementPreview;
      assert.equal(no.fits, false);
      assert.equal(no.hosts.length, await h.prisma.host.count());
      const l4 = no.hosts.find((host) => host.hostId === 'base-l4');
      assert.equal(l4?.kind, 'model-excluded');
      const preview = no.hosts.find((host) => host.hostId === 'preview-1');
      assert.equal(preview?.kind, 'not-enough-gpus');
      assert.match(preview?.reason ?? '', /80.25 GiB free each/);
      const quota = assertOk(
        await h.graphql<{ placementPreview: { quotaProblem: string } }>(
          PREVIEW,
          { input: { memoryPerGpu: '2t' } },
          alpha.viewer,
        ),
      ).placementPreview;
      assert.match(quota.quotaProblem, /per shard/);
      assertError(
        await h.graphql(PREVIEW, { input: { memoryPerGpu: '1kb' } }, alpha.viewer),
        'BAD_USER_INPUT',
      );
      assertError(
        await h.graphql(PREVIEW, { input: { memoryPerGpu: '1g', teamId: beta.id } }, alpha.viewer),
        'NOT_FOUND',
      );
      assert.deepEqual(await shardRowCounts(h), before);
    });

    it('stopShard: STOPPING and a stop command; released when the agent reports it stopped', async () => {
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

    it('a command the agent link cannot deliver leaves the shard PLACED for reconciliation', async () => {
      await registerPool('unreachable', ['unreachable-1']);
      commands.failure = new Error('no route to agent');
      try {
        const shard = assertOk(
          await createShard(h, alpha.member, {
            hostSelector: [{ key: 'pool', value: 'unreachable' }],
          }),
        ).createShard;
        assert.equal(shard.state, 'PLACED');
        const desired = await fleet.desiredShardsFor('unreachable-1', true);
        assert.deepEqual(
          desired.desired.map((spec) => spec.shardId),
          [shard.id],
        );
      } finally {
        commands.failure = undefined;
      }
    });

    it("shardEvents streams state changes of the caller's team only (admins: all)", async () => {
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
            },
            error: (error) => errors.push(error),
            complete: () => undefined,
          },
        );
        return { received, errors, dispose: () => client.dispose() };
      };
      const listeners = bus.subscriberCount;
      const mine = listen(alpha.viewer);
      const admin = listen(h.adminToken);
      for (let i = 0; i < 100 && bus.subscriberCount < listeners + 2; i++) await sleep(20);
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
        for (let i = 0; i < 100 && (mine.received.length < 2 || admin.received.length < 3); i++)
          await sleep(20);
        assert.deepEqual(mine.received, [
          { state: 'PLACED', teamId: alpha.id, previousState: null },
          { state: 'RUNNING', teamId: alpha.id, previousState: 'PLACED' },
        ]);
        assert.equal(admin.received.length, 3);
        assert.deepEqual(
          new Set(admin.received.map((e) => e.teamId)),
          new Set([alpha.id, beta.id]),
        );
        assert.deepEqual(mine.errors, []);
      } finally {
        await mine.dispose();
        await admin.dispose();
      }
      for (let i = 0; i < 100 && bus.subscriberCount > listeners; i++) await sleep(20);
      assert.equal(bus.subscriberCount, listeners, 'closing the socket ends the subscription');
    });

    it('malformed ids, cursors and injection strings are BAD_USER_INPUT everywhere; nothing written', async () => {
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

    it("shardEvents for another team's id is refused", async () => {
      const client = createClient({
        url: h.controlPlane.graphqlUrl.replace(/^http/, 'ws'),
        webSocketImpl: WebSocket,
        connectionParams: { Authorization: `Bearer ${alpha.viewer}` },
        retryAttempts: 0,
      });
      try {
        const errors = await new Promise<readonly { extensions?: { code?: string } }[]>(
          (resolve) => {
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
          },
        );
        assert.equal(errors[0]?.extensions?.code, 'NOT_FOUND', JSON.stringify(errors));
      } finally {
        await client.dispose();
      }
    });

    it('metrics: the placement histogram and hosts by state', async () => {
      const text = await (await fetch(`${h.controlPlane.url}/metrics`)).text();
      assert.match(text, /gpushards_placement_duration_seconds_count\{result="placed"\} [1-9]/);
      assert.match(
        text,
        /gpushards_placement_duration_seconds_count\{result="quota_exceeded"\} [1-9]/,
      );
      assert.match(
        text,
        /gpushards_placement_duration_seconds_count\{result="no_capacity"\} [1-9]/,
      );
      assert.match(text, /gpushards_hosts\{state="ONLINE"\} [1-9]/);
    });
  });
}

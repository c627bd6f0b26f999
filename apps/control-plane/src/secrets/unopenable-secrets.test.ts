import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PROTOCOL_VERSION } from '@gpushards/protocol';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { StuckShardSweeper } from '../fleet/stuck-shard-sweeper.js';
import { QueueService } from '../queue/queue.service.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import {
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  gpuUuidOf,
  MiB,
  registerRequest,
  reservedOn,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';

/**
 * A shard whose secret env this control plane cannot open (sealed with a key it does not hold:
 * a wrong GPUSHARDS_SECRETS_KEY, a key file lost or rotated away) cannot be launched: it ends
 * FAILED with a reason naming the key, its reservation released, and the other shards of the
 * host and of the queue go on.
 */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

/** A key id no key of this process has (ids are 12 hex digits). */
const FOREIGN_KEY_ID = '0123456789ab';

for (const kind of TEST_DATABASE_KINDS) {
  describe(`secrets this control plane cannot open, on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    let team: TestTeam;
    const commands = new FakeShardCommands();

    const create = async (pool: string, input: Record<string, unknown>) =>
      assertOk(
        await createShard(h, team.member, {
          hostSelector: [{ key: 'pool', value: pool }],
          ...input,
        }),
      ).createShard;

    /** Re-labels every stored secret of the shard as sealed with a key nobody here holds. */
    async function sealWithForeignKey(shardId: string): Promise<void> {
      const changed = await h.prisma.$executeRaw`
        UPDATE shard
           SET secret_env = (SELECT jsonb_object_agg(
                                      entry.key,
                                      regexp_replace(entry.value, '^v1\\.[^.]+\\.',
                                                     ${`v1.${FOREIGN_KEY_ID}.`}))
                               FROM jsonb_each_text(secret_env) AS entry)
         WHERE id = ${shardId}::uuid`;
      assert.equal(changed, 1);
    }

    async function stateOf(shardId: string) {
      return h.prisma.shard.findUniqueOrThrow({
        where: { id: shardId },
        select: { state: true, failureReason: true },
      });
    }

    const openReservations = (shardId: string) =>
      h.prisma.shardGpu.count({ where: { shardId, releasedAt: null } });

    function assertFailedNamingKey(shard: { state: string; failureReason: string | null }) {
      assert.equal(shard.state, 'FAILED');
      assert.match(shard.failureReason ?? '', /secret "DB_PASSWORD"/);
      assert.match(shard.failureReason ?? '', new RegExp(`key ${FOREIGN_KEY_ID}`));
    }

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { shardCommands: commands },
      });
      fleet = h.controlPlane.app.get(AgentReportsService);
      team = await createTestTeam(h, 'locked-out');
    });
    after(async () => {
      await h?.close();
    });

    it('reconcile: a PLACED shard fails naming the key and frees its GPU; the host is answered for its other shards', async () => {
      await fleet.registerHost(
        registerRequest('sealed-1', { gpus: 1, labels: { pool: 'sealed' } }),
      );
      const locked = await create('sealed', {
        name: 'locked',
        secretEnv: [{ name: 'DB_PASSWORD', value: 'hunter2' }],
      });
      const fine = await create('sealed', {
        name: 'fine',
        secretEnv: [{ name: 'API_TOKEN', value: 'opens' }],
      });
      const gpu = gpuUuidOf('sealed-1', 0);
      assert.equal(await reservedOn(h, gpu), 2 * (8 * GiB + 512 * MiB));
      await sealWithForeignKey(locked.id);

      const reply = await fleet.reconcile('sealed-1', {
        protocolVersion: PROTOCOL_VERSION,
        hostId: 'sealed-1',
        containers: [],
      });
      assert.deepEqual(
        reply.desired.map((spec) => [spec.shardId, spec.env]),
        [[fine.id, { API_TOKEN: 'opens' }]],
        'only the shard that opens is to run',
      );
      assertFailedNamingKey(await stateOf(locked.id));
      assert.equal(await openReservations(locked.id), 0);
      assert.equal(await reservedOn(h, gpu), 8 * GiB + 512 * MiB, 'only the other shard holds');
      assert.equal((await stateOf(fine.id)).state, 'PLACED');

      const again = await fleet.reconcile('sealed-1', {
        protocolVersion: PROTOCOL_VERSION,
        hostId: 'sealed-1',
        containers: [],
      });
      assert.deepEqual(
        again.desired.map((spec) => spec.shardId),
        [fine.id],
      );
      assertFailedNamingKey(await stateOf(locked.id));
    });

    it('a RUNNING shard: kept as it is for an agent that accepts it, the host answered for its other shards; an older agent is refused', async () => {
      await fleet.registerHost(registerRequest('sealed-4', { gpus: 1, labels: { pool: 'kept' } }));
      const running = await create('kept', {
        name: 'running-sealed',
        secretEnv: [{ name: 'DB_PASSWORD', value: 'hunter2' }],
      });
      const neighbour = await create('kept', { name: 'neighbour' });
      const reconcile = (containers: { shardId: string; running: boolean }[], accepts: boolean) =>
        fleet.reconcile('sealed-4', {
          protocolVersion: PROTOCOL_VERSION,
          hostId: 'sealed-4',
          containers: containers.map((c) => ({
            ...c,
            containerId: `container-${c.shardId}`,
            ...(c.running ? { status: 'running' as const } : {}),
          })),
          ...(accepts ? { acceptsKeptShards: true as const } : {}),
        });
      await reconcile([{ shardId: running.id, running: true }], true);
      assert.equal((await stateOf(running.id)).state, 'RUNNING', 'its container runs');
      await sealWithForeignKey(running.id);

      const reply = await reconcile([{ shardId: running.id, running: true }], true);
      assert.deepEqual(reply.keptShardIds, [running.id]);
      assert.deepEqual(
        reply.desired.map((spec) => spec.shardId),
        [neighbour.id],
        'the neighbour is still to run',
      );
      assert.equal((await stateOf(running.id)).state, 'RUNNING', 'not failed: it runs');
      assert.equal(await openReservations(running.id), 1, 'it keeps its GPU');

      const registered = await fleet.registerHost({
        ...registerRequest('sealed-4', { gpus: 1, labels: { pool: 'kept' } }),
        runningShards: [
          { shardId: running.id, containerId: `container-${running.id}`, state: 'RUNNING' },
        ],
        acceptsKeptShards: true,
      });
      assert.ok(registered.accepted);
      assert.deepEqual(registered.keptShardIds, [running.id], 'registering again: kept too');

      // An agent that does not know the field would remove the container: no answer for it.
      await assert.rejects(
        reconcile([{ shardId: running.id, running: true }], false),
        (error: Error) =>
          error.name === 'SecretsKeyError' &&
          new RegExp(`key ${FOREIGN_KEY_ID}`).test(error.message),
      );
      assert.equal((await stateOf(running.id)).state, 'RUNNING');
    });

    it('the stuck-shard sweep sends no launch for it and goes on to the next stuck shard', async () => {
      await fleet.registerHost(registerRequest('sealed-2', { gpus: 1, labels: { pool: 'swept' } }));
      const locked = await create('swept', {
        name: 'locked',
        secretEnv: [{ name: 'DB_PASSWORD', value: 'hunter2' }],
      });
      const fine = await create('swept', { name: 'fine' });
      await sealWithForeignKey(locked.id);
      const launches = (id: string) =>
        commands.forShard(id).filter((command) => command.type === 'launch').length;
      const before = { locked: launches(locked.id), fine: launches(fine.id) };

      const sweeper = h.controlPlane.app.get(StuckShardSweeper);
      const stuck = await sweeper.sweep(new Date(Date.now() + 3600_000));
      assert.ok(stuck.some((s) => s.id === locked.id));
      assert.equal(launches(locked.id), before.locked, 'nothing to send');
      assert.equal(launches(fine.id), before.fine + 1, 'the next stuck shard is sent again');
      await sweeper.resendOnStart();
      assert.equal(launches(locked.id), before.locked);
      assert.equal(launches(fine.id), before.fine + 2);
    });

    it('queue: a waiting shard admitted fails naming the key and frees its GPU; the shard behind it is placed', async () => {
      await fleet.registerHost(
        registerRequest('sealed-3', { gpus: 1, gpuBytes: 16 * GiB, labels: { pool: 'queued' } }),
      );
      const queue = h.controlPlane.app.get(QueueService);
      const filler = await create('queued', { name: 'filler', memoryPerGpu: '12g' });
      const locked = await create('queued', {
        name: 'locked',
        queue: true,
        memoryPerGpu: '4g',
        secretEnv: [{ name: 'DB_PASSWORD', value: 'hunter2' }],
      });
      const next = await create('queued', { name: 'next', queue: true, memoryPerGpu: '4g' });
      assert.equal(locked.state, 'PENDING');
      assert.equal(next.state, 'PENDING');
      await sealWithForeignKey(locked.id);

      assertOk(
        await h.graphql(
          `mutation ($id: ID!) { deleteShard(id: $id) { id } }`,
          { id: filler.id },
          team.member,
        ),
      );
      await queue.admitNow();
      assertFailedNamingKey(await stateOf(locked.id));
      assert.equal(await openReservations(locked.id), 0);
      assert.equal((await stateOf(next.id)).state, 'PLACED');
      assert.equal(await reservedOn(h, gpuUuidOf('sealed-3', 0)), 4 * GiB + 512 * MiB);
      assert.ok(
        !commands.forShard(locked.id).some((command) => command.type === 'launch'),
        'no launch without its secrets',
      );
    });
  });
}

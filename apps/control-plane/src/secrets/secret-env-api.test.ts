import assert from 'node:assert/strict';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { launchSpecOf } from '../shards/launch-spec.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import {
  assertError,
  assertOk,
  createTestTeam,
  GiB,
  registerRequest,
  shardRowCounts,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { sealedKeyId } from './secret-box.js';
import { rotateSecretsKeyFile } from './rotate-secrets-key.js';
import { SECRETS_KEY_FILE } from './secrets-key.js';

/** Secret env values through the API, the database and the launch spec, on both databases. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const SECRET = 'hunter2-the-real-password';
const CREATE = `mutation ($input: CreateShardInput!) {
  createShard(input: $input) { id env { name value } secretEnv { name value } }
}`;
const READ = `query ($id: ID!) { shard(id: $id) { id env { name value } secretEnv { name value } } }`;

interface ShardEnv {
  id: string;
  env: { name: string; value: string }[];
  secretEnv: { name: string; value: string }[];
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`secret env on ${kind}`, () => {
    let h: ApiTestHarness;
    const commands = new FakeShardCommands();
    let team: TestTeam;

    const create = (input: Record<string, unknown>, token = team.member) =>
      h.graphql<{ createShard: ShardEnv }>(
        CREATE,
        {
          input: {
            image: 'ghcr.io/org/trainer:1.2',
            name: 'secretive',
            memoryPerGpu: '8g',
            queue: false,
            ...input,
          },
        },
        token,
      );

    async function rowOf(id: string): Promise<ShardRecord> {
      const rows = await h.prisma.$queryRaw<ShardRecord[]>`
        SELECT ${SHARD_COLUMNS} FROM shard WHERE id = ${id}::uuid`;
      return rows[0]!;
    }

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: { shardCommands: commands },
      });
      const fleet = h.controlPlane.app.get(AgentReportsService);
      await fleet.registerHost(registerRequest('secret-host', { gpus: 2, gpuBytes: 80 * GiB }));
      team = await createTestTeam(h, 'vault');
    });
    after(async () => {
      await h?.close();
    });

    it('the key file is created 0600 in the data folder on first start', async () => {
      const info = await stat(join(h.dataDir, SECRETS_KEY_FILE));
      assert.equal(info.mode & 0o777, 0o600);
      const key = Buffer.from(
        (await readFile(join(h.dataDir, SECRETS_KEY_FILE), 'utf8')).trim(),
        'base64',
      );
      assert.equal(key.length, 32);
    });

    it('a secret is masked for every role, stored sealed, kept out of the audit log, and launched in clear', async () => {
      const shard = assertOk(
        await create({
          env: [{ name: 'EPOCHS', value: '3' }],
          secretEnv: [{ name: 'DB_PASSWORD', value: SECRET }],
        }),
      ).createShard;
      assert.deepEqual(shard.env, [{ name: 'EPOCHS', value: '3' }], 'plain env stays plain');
      assert.deepEqual(shard.secretEnv, [{ name: 'DB_PASSWORD', value: '********' }]);
      for (const token of [team.member, team.viewer, h.adminToken]) {
        const read = assertOk(await h.graphql<{ shard: ShardEnv }>(READ, { id: shard.id }, token));
        assert.deepEqual(read.shard.secretEnv, [{ name: 'DB_PASSWORD', value: '********' }]);
        assert.ok(!JSON.stringify(read).includes(SECRET));
      }
      const viewer = assertOk(
        await h.graphql<{ shard: ShardEnv }>(READ, { id: shard.id }, team.viewer),
      );
      assert.deepEqual(
        viewer.shard.env,
        [{ name: 'EPOCHS', value: '********' }],
        'VIEWER: plain env masked too',
      );

      const row = await rowOf(shard.id);
      const stored = JSON.stringify(row.secretEnv);
      assert.ok(!stored.includes(SECRET), 'not in clear in the database');
      assert.match(stored, /"DB_PASSWORD":"v1\./);
      const audits = await h.prisma.auditEvent.findMany({ where: { targetId: shard.id } });
      assert.ok(audits.length > 0);
      assert.ok(!JSON.stringify(audits).includes(SECRET), 'not in the audit log');

      const launch = commands.forShard(shard.id).find((c) => c.type === 'launch');
      assert.ok(launch?.type === 'launch');
      assert.deepEqual(launch.spec.env, { EPOCHS: '3', DB_PASSWORD: SECRET }, 'the agent gets it');
    });

    it('bad secret env is refused with BAD_USER_INPUT naming the field; nothing is written', async () => {
      const before = await shardRowCounts(h);
      const cases: [string, Record<string, unknown>, string][] = [
        [
          'a name in both env and secretEnv',
          { env: [{ name: 'TOKEN', value: 'a' }], secretEnv: [{ name: 'TOKEN', value: 'b' }] },
          'input.secretEnv[0].name',
        ],
        [
          'a reserved key',
          { secretEnv: [{ name: 'CUDA_VISIBLE_DEVICES', value: '0' }] },
          'input.secretEnv',
        ],
        ['an LD_* key', { secretEnv: [{ name: 'LD_AUDIT', value: '/x.so' }] }, 'input.secretEnv'],
        [
          'a duplicate secret',
          {
            secretEnv: [
              { name: 'K', value: '1' },
              { name: 'K', value: '2' },
            ],
          },
          'input.secretEnv[1].name',
        ],
        [
          'oversize',
          { secretEnv: [{ name: 'BIG', value: 'x'.repeat(40_000) }] },
          'input.secretEnv',
        ],
        [
          'oversize only together with env',
          {
            env: [{ name: 'HALF', value: 'x'.repeat(20_000) }],
            secretEnv: [{ name: 'OTHER', value: 'y'.repeat(20_000) }],
          },
          'input.secretEnv',
        ],
      ];
      for (const [what, input, field] of cases) {
        const response = await create(input);
        assertError(response, 'BAD_USER_INPUT', what);
        const problems = response.errors![0]!.extensions!['problems'] as { field: string }[];
        assert.ok(
          problems.some((p) => p.field === field),
          `${what}: ${JSON.stringify(problems).slice(0, 300)}`,
        );
        assert.ok(!JSON.stringify(response).includes('x'.repeat(1000)), `${what}: not echoed`);
      }
      assert.deepEqual(await shardRowCounts(h), before);
    });

    it('rotating the key seals every secret again; launches still carry the value', async () => {
      const shard = assertOk(
        await create({ name: 'rotated', secretEnv: [{ name: 'API_KEY', value: SECRET }] }),
      ).createShard;
      const keyFile = join(h.dataDir, SECRETS_KEY_FILE);
      const oldKey = await readFile(keyFile, 'utf8');
      const oldId = sealedKeyId(
        JSON.parse(JSON.stringify((await rowOf(shard.id)).secretEnv)).API_KEY,
      );

      const result = await rotateSecretsKeyFile(h.prisma, h.dataDir);
      assert.ok(result.shards >= 2, `re-sealed ${result.shards}`);
      assert.notEqual(result.keyId, oldId);
      const newKey = await readFile(keyFile, 'utf8');
      assert.notEqual(newKey, oldKey, 'the key file holds the new key');
      assert.equal((await stat(keyFile)).mode & 0o777, 0o600);

      const row = await rowOf(shard.id);
      const sealed = (row.secretEnv as Record<string, string>)['API_KEY']!;
      assert.equal(sealedKeyId(sealed), result.keyId);
      assert.ok(!sealed.includes(SECRET));
      assert.deepEqual(launchSpecOf(row, []).env, { API_KEY: SECRET });

      const again = await rotateSecretsKeyFile(h.prisma, h.dataDir);
      assert.notEqual(again.keyId, result.keyId, 'each rotation makes a new key');
      assert.deepEqual(launchSpecOf(await rowOf(shard.id), []).env, { API_KEY: SECRET });
    });
  });
}

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { RegisterReply, RegisterRequest } from '@gpushards/protocol';
import { PrismaService, type DirectSql } from '../database/index.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { FakeShardCommands } from '../testing/fake-shard-commands.js';
import {
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  gpuUuidOf,
  heartbeat,
  MiB,
  registerRequest,
  reservedOn,
  stateEvent,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from '../testing/index.js';
import { AgentReportsService } from './agent-reports.service.js';
import { ManualClock } from './clock.js';
import { HostOfflineSweeper } from './host-offline-sweeper.js';
import { REGISTRATION_TRANSACTION } from './host-registration.service.js';

/** Registrations written in batches (HostRegistrationService): what each keeps, and the bound. */

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

const OFFLINE_SECONDS = 30;
const CORDON = `mutation ($id: ID!) { cordonHost(id: $id) { id state cordoned } }`;

/** Registration transactions as they start and end (told apart by their options). */
class RegistrationTransactions {
  started = 0;
  inFlight = 0;
  most = 0;
  private readonly waiting: (() => void)[] = [];
  private readonly original: DirectSql['transaction'];

  constructor(private readonly direct: DirectSql) {
    this.original = direct.transaction;
    const spy = async <T>(
      work: Parameters<DirectSql['transaction']>[0],
      options?: Parameters<DirectSql['transaction']>[1],
    ): Promise<T> => {
      if (options !== REGISTRATION_TRANSACTION) {
        return (await this.original.call(direct, work, options)) as T;
      }
      this.started++;
      this.inFlight++;
      this.most = Math.max(this.most, this.inFlight);
      for (const wake of this.waiting.splice(0)) wake();
      try {
        return (await this.original.call(direct, work, options)) as T;
      } finally {
        this.inFlight--;
      }
    };
    direct.transaction = spy as DirectSql['transaction'];
  }

  /** Resolves when the next registration transaction starts. */
  nextStart(): Promise<void> {
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  restore(): void {
    this.direct.transaction = this.original;
  }
}

function accepted(reply: RegisterReply) {
  assert.equal(reply.accepted, true);
  if (!reply.accepted) throw new Error('refused');
  return reply;
}

for (const kind of TEST_DATABASE_KINDS) {
  describe(`host registration on ${kind}`, () => {
    let h: ApiTestHarness;
    let fleet: AgentReportsService;
    let sweeper: HostOfflineSweeper;
    let direct: DirectSql;
    let team: TestTeam;
    const clock = new ManualClock(new Date('2030-01-01T00:00:00Z'));

    before(async () => {
      h = await startApiTestHarness(kind, {
        ...(postgres ? { server: postgres } : {}),
        controlPlane: {
          clock,
          shardCommands: new FakeShardCommands(),
          hostOfflineSeconds: OFFLINE_SECONDS,
        },
      });
      fleet = h.controlPlane.app.get(AgentReportsService);
      sweeper = h.controlPlane.app.get(HostOfflineSweeper);
      // The tests sweep when they mean to (the sweeper's timer runs on real time).
      await sweeper.onModuleDestroy();
      direct = h.controlPlane.app.get(PrismaService).direct;
      team = await createTestTeam(h, 'registration-team');
    });
    after(async () => {
      await h?.close();
    });

    async function stateOf(hostId: string): Promise<string> {
      return (await h.prisma.host.findUniqueOrThrow({ where: { id: hostId } })).state;
    }

    it('registrations that arrive together are one transaction, each host written as alone', async () => {
      const hosts = {
        fresh: 'together-new',
        known: 'together-known',
        back: 'together-back',
        cordoned: 'together-cordoned',
        lost: 'together-lost',
        gone: 'together-gone',
      };
      for (const id of Object.values(hosts).filter((id) => id !== hosts.fresh)) {
        await fleet.registerHost(
          registerRequest(id, { gpus: id === hosts.lost ? 1 : 2, labels: { pool: id } }),
        );
      }
      const place = async () =>
        assertOk(
          await createShard(h, team.member, {
            memoryPerGpu: '10g',
            hostSelector: [{ key: 'pool', value: hosts.lost }],
          }),
        ).createShard;
      const kept = await place();
      const ended = await place();
      for (const shard of [kept, ended]) {
        await fleet.applyShardStateEvent(
          hosts.lost,
          stateEvent(hosts.lost, shard.id, 'RUNNING', clock.now()),
        );
      }
      assertOk(await h.graphql(CORDON, { id: hosts.cordoned }));
      clock.advance((OFFLINE_SECONDS + 1) * 1000);
      for (const id of [hosts.known, hosts.gone]) {
        await fleet.recordHeartbeat(id, heartbeat(id, clock.now()));
      }
      const marked = await sweeper.sweep();
      assert.deepEqual(marked.sort(), [hosts.back, hosts.cordoned, hosts.lost].sort());
      const gpu = gpuUuidOf(hosts.lost, 0);
      assert.equal(await reservedOn(h, gpu), 0, 'released while OFFLINE');

      const requests: RegisterRequest[] = [
        registerRequest(hosts.fresh, { gpus: 2 }),
        registerRequest(hosts.known, { gpus: 2, labels: { pool: hosts.known } }),
        registerRequest(hosts.back, { gpus: 2, labels: { pool: hosts.back } }),
        registerRequest(hosts.cordoned, { gpus: 2, labels: { pool: hosts.cordoned } }),
        registerRequest(hosts.lost, {
          gpus: 1,
          labels: { pool: hosts.lost },
          runningShards: [{ shardId: kept.id, containerId: 'c-kept', state: 'RUNNING' }],
        }),
        {
          ...registerRequest(hosts.gone, { gpus: 2, labels: { pool: hosts.gone } }),
          gpus: registerRequest(hosts.gone, { gpus: 2 }).gpus.slice(0, 1),
        },
        // Its agent gave up waiting and asked again: written once, both answered.
        registerRequest(hosts.known, { gpus: 2, labels: { pool: hosts.known } }),
      ];
      const registrations = new RegistrationTransactions(direct);
      let replies: RegisterReply[];
      try {
        replies = await Promise.all(requests.map((request) => fleet.registerHost(request)));
      } finally {
        registrations.restore();
      }
      assert.equal(registrations.started, 1, 'one transaction for the seven');
      for (const [i, reply] of replies.entries()) {
        assert.equal(accepted(reply).hostId, requests[i]!.hostId);
      }

      assert.equal(await stateOf(hosts.fresh), 'ONLINE');
      assert.equal(await stateOf(hosts.known), 'ONLINE');
      assert.equal(await stateOf(hosts.back), 'ONLINE', 'OFFLINE back ONLINE');
      assert.equal(await stateOf(hosts.cordoned), 'CORDONED', 'a cordon survives');
      assert.equal(await stateOf(hosts.lost), 'ONLINE');
      // The LOST shard its agent runs takes its reservation again; the other FAILS.
      const shards = await h.prisma.shard.findMany({ where: { hostId: hosts.lost } });
      assert.equal(shards.find((s) => s.id === kept.id)!.state, 'RUNNING');
      assert.equal(shards.find((s) => s.id === ended.id)!.state, 'FAILED');
      assert.equal(await reservedOn(h, gpu), 10 * GiB + 512 * MiB);
      const lostReply = accepted(replies[4]!);
      assert.deepEqual(
        lostReply.desired.map((spec) => spec.shardId),
        [kept.id],
      );
      assert.ok(lostReply.stoppedShardIds.includes(ended.id));
      assert.deepEqual(accepted(replies[0]!).desired, []);
      // The GPU its agent no longer lists takes no new shards.
      const goneGpus = await h.prisma.gpu.findMany({
        where: { hostId: hosts.gone },
        orderBy: { index: 'asc' },
      });
      assert.equal(goneGpus[0]!.missingSince, null);
      assert.ok(goneGpus[1]!.missingSince !== null, 'the unlisted GPU is missing');
      const knownGpus = await h.prisma.gpu.findMany({ where: { hostId: hosts.known } });
      assert.ok(knownGpus.every((g) => g.missingSince === null));

      const audit = await h.prisma.auditEvent.findMany({
        where: {
          OR: [
            { action: 'host.register', targetId: { in: Object.values(hosts) } },
            {
              action: { in: ['shard.recover', 'shard.fail'] },
              targetId: { in: [kept.id, ended.id] },
            },
          ],
        },
        orderBy: { at: 'asc' },
      });
      const registered = audit.filter((row) => row.action === 'host.register');
      const last = new Map(
        registered.map((row) => [row.targetId, row.details as Record<string, unknown>]),
      );
      assert.deepEqual(
        Object.fromEntries(
          Object.values(hosts).map((id) => [
            id,
            [last.get(id)?.['previousState'], last.get(id)?.['state']],
          ]),
        ),
        {
          [hosts.fresh]: [null, 'ONLINE'],
          [hosts.known]: ['ONLINE', 'ONLINE'],
          [hosts.back]: ['OFFLINE', 'ONLINE'],
          [hosts.cordoned]: ['OFFLINE', 'CORDONED'],
          [hosts.lost]: ['OFFLINE', 'ONLINE'],
          [hosts.gone]: ['ONLINE', 'ONLINE'],
        },
      );
      assert.equal(
        registered.filter((row) => row.targetId === hosts.known).length,
        2,
        'the first registration and one for the two requests of the batch',
      );
      assert.ok(audit.every((row) => row.actorTokenId === null));
      assert.deepEqual(
        audit
          .filter((row) => row.action !== 'host.register')
          .map((row) => [row.action, row.targetId])
          .sort(),
        [
          ['shard.fail', ended.id],
          ['shard.recover', kept.id],
        ].sort(),
      );
    });

    it('a registration storm holds one pooled connection at a time: what arrives meanwhile waits for the next batch', async () => {
      const wave = (from: number) =>
        Array.from({ length: 20 }, (_, i) => registerRequest(`storm-${from + i}`, { gpus: 8 }));
      const registrations = new RegistrationTransactions(direct);
      let replies: RegisterReply[];
      try {
        const first = registrations.nextStart();
        const early = wave(0).map((request) => fleet.registerHost(request));
        // The second wave comes while the first is being written.
        await first;
        const late = wave(20).map((request) => fleet.registerHost(request));
        replies = await Promise.all([...early, ...late]);
      } finally {
        registrations.restore();
      }
      assert.equal(registrations.most, 1, 'never two registration transactions at once');
      assert.ok(
        registrations.started >= 2 && registrations.started < 40,
        `batched: ${registrations.started} transactions for 40 registrations`,
      );
      assert.ok(replies.every((reply) => reply.accepted));
      assert.equal(
        await h.prisma.host.count({ where: { id: { startsWith: 'storm-' }, state: 'ONLINE' } }),
        40,
      );
      assert.equal(await h.prisma.gpu.count({ where: { hostId: { startsWith: 'storm-' } } }), 320);
    });

    it('a batch that cannot be written is written host by host: only what fails alone fails', async () => {
      // Two hosts that list one GPU: one statement cannot write that row twice.
      const one = registerRequest('twin-1', { gpus: 1 });
      const two = { ...registerRequest('twin-2', { gpus: 1 }), gpus: one.gpus };
      const registrations = new RegistrationTransactions(direct);
      let replies: RegisterReply[];
      try {
        replies = await Promise.all([one, two].map((request) => fleet.registerHost(request)));
      } finally {
        registrations.restore();
      }
      assert.equal(registrations.started, 3, 'the batch, then each alone');
      assert.ok(replies.every((reply) => reply.accepted));
      assert.equal(await stateOf('twin-1'), 'ONLINE');
      assert.equal(await stateOf('twin-2'), 'ONLINE');
    });
  });
}

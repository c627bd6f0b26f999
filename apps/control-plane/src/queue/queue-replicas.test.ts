import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import {
  postGraphql,
  startApiTestHarness,
  type ApiTestHarness,
} from '../testing/api-test-harness.js';
import { startControlPlaneChild, type ControlPlaneChild } from '../testing/control-plane-child.js';
import {
  assertOk,
  createShard,
  createTestTeam,
  GiB,
  registerRequest,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { startPostgres, type PostgresServer } from '../testing/index.js';
import { ADMITTER_APPLICATION_NAME, ADMITTER_LOCK } from './admission-lease.js';
import { ADMISSION_LOCK } from './queue.service.js';

/**
 * Two control-plane processes on one PostgreSQL share one queue. The fleet: 20 hosts × 2 GPUs
 * × 20 GiB (context overhead 512 MiB), full with one 19 GiB shard per GPU; behind it 80 shards
 * of 9 GiB wait (9.5 GiB reserved: two fit a freed GPU, none fits the 0.5 GiB left on a full
 * one, or the 1 GiB left beside two of them). So every freed GPU takes exactly two, in queue
 * order, and the outcome is exact whichever replica admits.
 *
 * The sweep is off in both: only wake-ups (a replica's own commits, a follower's forwarded
 * changes, a new admitter's whole read) place anything.
 */

const HOSTS = 20;
const PENDING = 80;
const DELETE = `mutation ($id: ID!) { deleteShard(id: $id) { id state } }`;

describe('the queue with two control-plane replicas', { timeout: 300_000 }, () => {
  let postgres: PostgresServer;
  let h: ApiTestHarness;
  let sql: pg.Client;
  let team: TestTeam;
  const children: ControlPlaneChild[] = [];
  const dataDirs: string[] = [];
  const full: string[] = [];
  const pending: string[] = [];
  /** Called on every shard state change any replica relays (the test's condition waits). */
  let changed: () => void = () => undefined;

  before(async () => {
    postgres = await startPostgres();
    h = await startApiTestHarness('postgres', {
      server: postgres,
      controlPlane: { hostOfflineSeconds: 86_400 },
    });
    const fleet = h.controlPlane.app.get(AgentReportsService);
    for (let i = 0; i < HOSTS; i++) {
      await fleet.registerHost(
        registerRequest(`host-${String(i).padStart(2, '0')}`, { gpus: 2, gpuBytes: 20 * GiB }),
      );
    }
    team = await createTestTeam(h, 'replicas');
    const create = async (name: string, memoryPerGpu: string, queue: boolean) =>
      assertOk(await createShard(h, team.member, { name, memoryPerGpu, queue })).createShard;
    for (let i = 0; i < HOSTS * 2; i++) {
      const shard = await create(`full-${i}`, '19g', false);
      assert.equal(shard.state, 'PLACED');
      full.push(shard.id);
    }
    for (let i = 0; i < PENDING; i++) {
      const shard = await create(`wait-${i}`, '9g', true);
      assert.equal(shard.state, 'PENDING');
      pending.push(shard.id);
    }
    // The setup replica leaves (its lease goes with it); its database stays for the children.
    const url = h.controlPlane.config.database.url!;
    await h.controlPlane.close();
    sql = new pg.Client({ connectionString: url });
    await sql.connect();
    sql.on('notification', () => changed());
    await sql.query('LISTEN gpushards_shard_events');
    for (let i = 0; i < 2; i++) dataDirs.push(await mkdtemp(join(tmpdir(), 'gpushards-replica-')));
    children.push(
      ...(await Promise.all(
        dataDirs.map((dir) =>
          startControlPlaneChild(url, dir, {
            GPUSHARDS_HOST_OFFLINE_SECONDS: '86400',
            GPUSHARDS_QUEUE_SWEEP_MS: '0',
          }),
        ),
      )),
    );
  });

  after(async () => {
    await Promise.all(children.map((child) => child.stop()));
    await sql?.end();
    await postgres?.stop();
    await Promise.all(
      [...dataDirs, h?.dataDir].map((dir) => dir && rm(dir, { recursive: true, force: true })),
    );
  });

  /**
   * Resolves once `check` holds, checked now and after every relayed shard change (the suite's
   * timeout ends a wait that never comes).
   */
  async function until(check: () => Promise<boolean>): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      let checking = false;
      let again = false;
      const run = async () => {
        if (checking) {
          again = true;
          return;
        }
        checking = true;
        do {
          again = false;
          if (await check()) {
            changed = () => undefined;
            checking = false;
            resolve();
            return;
          }
        } while (again);
        checking = false;
      };
      changed = () => void run().catch(reject);
      void run().catch(reject);
    });
  }

  async function placedFromQueue(): Promise<number> {
    const { rows } = await sql.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM shard WHERE id = ANY($1::uuid[]) AND state = 'PLACED'`,
      [pending],
    );
    return rows[0]!.n;
  }

  /** Which child holds the admitter's lease (its lease connection names its pid). */
  async function admitter(): Promise<ControlPlaneChild> {
    const line = await Promise.race(children.map((c) => c.logged('this replica is the admitter')));
    const { rows } = await sql.query<{ name: string }>(
      `SELECT activity.application_name AS name FROM pg_locks lock
         JOIN pg_stat_activity activity ON activity.pid = lock.pid
        WHERE lock.locktype = 'advisory' AND lock.granted AND lock.objid = $1`,
      [ADMITTER_LOCK],
    );
    assert.equal(rows.length, 1, `one admitter: ${line}`);
    const pid = Number(rows[0]!.name.split(':')[1]);
    const child = children.find((c) => c.process.pid === pid);
    assert.ok(child, `the admitter ${rows[0]!.name} is one of the children`);
    return child;
  }

  /** A follower's lease connection, once the follower has said it asks for the lease. */
  async function leaseConnectionOf(
    child: ControlPlaneChild,
  ): Promise<{ waitEventType: string | null; query: string }> {
    await child.logged('another replica is the admitter; asking every');
    const { rows } = await sql.query<{ waitEventType: string | null; query: string }>(
      `SELECT wait_event_type AS "waitEventType", query FROM pg_stat_activity
        WHERE application_name = $1`,
      [`${ADMITTER_APPLICATION_NAME}:${child.process.pid}`],
    );
    assert.equal(rows.length, 1, "the follower's lease connection");
    return rows[0]!;
  }

  /** Every reservation counted once, every GPU's reserved bytes their sum, none past capacity. */
  async function assertConsistent(placed: number): Promise<void> {
    const { rows: doubled } = await sql.query(
      `SELECT shard_id FROM shard_gpu WHERE released_at IS NULL
        GROUP BY shard_id HAVING count(*) > 1`,
    );
    assert.deepEqual(doubled, [], 'no shard holds two reservations');
    const { rows: gpus } = await sql.query<{ uuid: string; reserved: string; live: string }>(
      `SELECT gpu.uuid, gpu.reserved_bytes::text AS reserved,
              coalesce(sum(held.reserved_bytes), 0)::text AS live
         FROM gpu LEFT JOIN shard_gpu held ON held.gpu_uuid = gpu.uuid AND held.released_at IS NULL
        GROUP BY gpu.uuid`,
    );
    for (const gpu of gpus) assert.equal(gpu.reserved, gpu.live, `GPU ${gpu.uuid}`);
    const { rows: states } = await sql.query<{ state: string; n: number }>(
      `SELECT state::text, count(*)::int AS n FROM shard WHERE id = ANY($1::uuid[])
        GROUP BY state ORDER BY state`,
      [pending],
    );
    assert.deepEqual(
      Object.fromEntries(states.map((row) => [row.state, row.n])),
      { PENDING: PENDING - placed, PLACED: placed },
      'placed exactly once each, the rest still waiting',
    );
    // None left waiting that fits: no GPU has 9.5 GiB free.
    const { rows: roomy } = await sql.query(
      `SELECT uuid FROM gpu WHERE total_bytes - reserved_bytes >= $1`,
      [String(9.5 * GiB)],
    );
    assert.deepEqual(roomy, [], 'no GPU with room for a waiting shard');
  }

  const deleteThrough = async (child: ControlPlaneChild, id: string) => {
    const response = await postGraphql<{ deleteShard: { state: string } }>(
      child.graphqlUrl,
      DELETE,
      { id },
      team.member,
    );
    assert.equal(assertOk(response).deleteShard.state, 'DELETED');
  };

  it('capacity freed on either replica: every freed GPU takes two waiting shards, each once', async () => {
    const leader = await admitter();
    const follower = children.find((c) => c !== leader)!;
    // The follower asks for the lease now and then; a statement waiting for it would hold a
    // snapshot, and with it every dead row version, for as long as the admitter lives.
    const lease = await leaseConnectionOf(follower);
    assert.notEqual(
      lease.waitEventType,
      'Lock',
      `the follower waits in no statement: ${lease.query}`,
    );
    const freed = full.splice(0, 10);
    // Both at once: the follower's deletes reach the admitter only through its forwarded changes.
    await Promise.all(freed.map((id, i) => deleteThrough(i % 2 === 0 ? follower : leader, id)));
    await until(async () => (await placedFromQueue()) >= 20);
    await assertConsistent(20);
  });

  it('the admitter killed in the middle of a pass: the other takes over, nothing lost or doubled', async () => {
    const leader = await admitter();
    const follower = children.find((c) => c !== leader)!;
    // Hold every pass at its first statement: the admission lock its transaction takes.
    await sql.query('SELECT pg_advisory_lock($1::bigint)', [ADMISSION_LOCK]);
    // Freed through the admitter only: the wake-ups die with it, its successor must not need them.
    // Each delete's commit wakes the admitter's pass before the delete is answered; the pass
    // cannot get past the lock the test holds, so it is killed with its placements undone.
    const freed = full.splice(0, 10);
    await Promise.all(freed.map((id) => deleteThrough(leader, id)));
    await leader.kill();
    // The follower gets the lease once PostgreSQL has ended the dead replica's session.
    await follower.logged('this replica is the admitter');
    assert.equal(await admitter(), follower);
    assert.equal(await placedFromQueue(), 20, 'nothing placed while the lock was held');
    await sql.query('SELECT pg_advisory_unlock($1::bigint)', [ADMISSION_LOCK]);
    await until(async () => (await placedFromQueue()) >= 40);
    await assertConsistent(40);
    assert.deepEqual(follower.errors, []);
  });
});

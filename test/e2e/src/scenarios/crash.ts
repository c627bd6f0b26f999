import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';

import { docker } from '../support/docker.js';
import { graphqlResponse } from '../support/graphql.js';
import { sleep, waitFor } from '../support/processes.js';
import type { Runner } from '../support/runner.js';
import type { World } from '../support/world.js';

/** Rounds of the crash check: each kills an agent and a control plane once. */
const ROUNDS = Number(process.env.GPUSHARDS_E2E_CRASH_ROUNDS ?? 3);
/** Each round's kills land within this long after its burst is sent. */
const KILL_WITHIN_MS = 1_500;
const CREATES_PER_ROUND = 4;
const TRANSITIONAL = ['PLACED', 'STARTING', 'STOPPING'];

/** A small seeded generator, so that a failed run can be replayed (GPUSHARDS_E2E_CRASH_SEED). */
function generator(seed: number): (n: number) => number {
  let state = seed >>> 0;
  return (n) => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) / 4294967296) * n;
  };
}

/**
 * Crashes of the processes that own a shard's life, each followed by the invariants
 * (support/invariants.ts) and the issue's own counts: no shard stuck, lost or duplicated, no
 * duplicate container, reservations equal to the live shards.
 */
export function crashChecks(runner: Runner, world: World): void {
  const { system } = world;

  runner.check(
    `kill -9 agent b and control plane 1 at random points of create, stop, resize and delete bursts, ${ROUNDS} rounds: nothing stuck, lost or duplicated; every create resent with its key answers the original shard`,
    async () => {
      const seed = Number(process.env.GPUSHARDS_E2E_CRASH_SEED ?? randomBytes(4).readUInt32BE());
      const random = generator(seed);
      const pick = (n: number) => Math.floor(random(n));
      const team = await world.createTeam('crash', {
        maxTotal: '1t',
        maxShards: 500,
        maxPerShard: '8g',
      });
      const cp1 = system.controlPlane(1);
      const agentB = system.agent('b');
      const create = `mutation ($input: CreateShardInput!) { createShard(input: $input) { id } }`;
      const inputOf = (key: string) =>
        world.input({
          name: key,
          memoryPerGpu: '256m',
          gpuModelInclude: ['L4'],
          idempotencyKey: key,
        });
      /** How each stop, resize and delete of the bursts ended: ok, an error code, cut off. */
      const outcomes = new Map<string, number>();
      const count = (what: string) => outcomes.set(what, (outcomes.get(what) ?? 0) + 1);
      /**
       * A call to control plane `n` (1 is killed in the middle): the data, or undefined when
       * it was refused or cut off.
       */
      const send = async <T>(
        query: string,
        variables: Record<string, unknown>,
        n: 1 | 2 = 1,
        what = '',
      ) => {
        try {
          const response = await graphqlResponse<T>(
            system.controlPlane(n).graphqlUrl,
            team.token,
            query,
            variables,
            20_000,
          );
          if (what) count(`${what} ${response.errors?.[0]?.extensions?.code ?? 'ok'}`);
          return response.data ?? undefined;
        } catch {
          if (what) count(`${what} cut off`);
          return undefined;
        }
      };
      const crashShards = () =>
        system.query<{ id: string; name: string; state: string; idempotency_key: string }>(
          `SELECT id, name, state::text AS state, idempotency_key FROM shard WHERE team_id = $1`,
          [team.id],
        );

      /** key → the shard its first answer named (undefined: the answer never came back). */
      const creates = new Map<string, string | undefined>();
      const kills: string[] = [];
      let resent = 0;
      let replayedAnswered = 0;
      for (let round = 0; round < ROUNDS; round++) {
        const live = (await crashShards()).filter((s) => s.state !== 'DELETED');
        const requests: Promise<unknown>[] = [];
        const inFlight: string[] = [];
        for (let i = 0; i < CREATES_PER_ROUND; i++) {
          const key = `crash-${system.runId}-r${round}-c${i}`;
          creates.set(key, undefined);
          inFlight.push(key);
          requests.push(
            send<{ createShard: { id: string } }>(create, { input: inputOf(key) }).then((data) => {
              if (data?.createShard) creates.set(key, data.createShard.id);
            }),
          );
        }
        // Through both control planes: those sent to control plane 2 are committed while
        // agent b may be down (their commands lost), those sent to 1 may be cut off.
        for (const [i, shard] of live.entries()) {
          const id = shard.id;
          const n = i % 2 === 0 ? 1 : 2;
          switch (pick(4)) {
            case 0:
              requests.push(
                send(
                  `mutation ($id: ID!) { stopShard(id: $id, graceSeconds: 1) { id } }`,
                  { id },
                  n,
                  'stop',
                ),
              );
              break;
            case 1:
              requests.push(
                send(
                  `mutation ($id: ID!, $size: String!) { resizeShard(id: $id, memoryPerGpu: $size) { id } }`,
                  { id, size: pick(2) === 0 ? '384m' : '320m' },
                  n,
                  'resize',
                ),
              );
              break;
            case 2:
              requests.push(
                send(`mutation ($id: ID!) { deleteShard(id: $id) { id } }`, { id }, n, 'delete'),
              );
              break;
            default:
              break;
          }
        }
        // Both killed within the window, in a random order and at random moments.
        const agentAt = pick(KILL_WITHIN_MS);
        const cpAt = pick(KILL_WITHIN_MS);
        kills.push(`agent +${agentAt} ms, cp1 +${cpAt} ms`);
        await Promise.all([
          sleep(agentAt).then(() => agentB.process.kill9()),
          sleep(cpAt).then(() => cp1.process.kill9()),
        ]);
        await Promise.all(requests);
        await Promise.all([system.restartAgent('b'), system.restartControlPlane(1)]);

        // This round's creates resent with their keys, as a client whose call was cut off
        // would, half through each control plane: the original shard where an answer came.
        for (const [i, key] of inFlight.entries()) {
          const response = await graphqlResponse<{ createShard: { id: string } }>(
            system.controlPlane(i % 2 === 0 ? 1 : 2).graphqlUrl,
            team.token,
            create,
            { input: inputOf(key) },
          );
          assert.deepEqual(response.errors, undefined, `resending ${key}`);
          const id = response.data!.createShard.id;
          const first = creates.get(key);
          if (first !== undefined) {
            assert.equal(id, first, `resent ${key} answers its first shard`);
            replayedAnswered += 1;
          }
          creates.set(key, id);
          resent += 1;
        }
      }

      // Settles on its own: nothing stuck in PLACED, STARTING or STOPPING.
      const settleStarted = Date.now();
      let last: { id: string; state: string }[] = [];
      try {
        await waitFor(
          'every crash shard to leave PLACED, STARTING and STOPPING',
          async () => {
            last = (await crashShards()).filter((s) => TRANSITIONAL.includes(s.state));
            return last.length === 0 ? true : undefined;
          },
          45_000,
          250,
        );
      } catch (error) {
        throw new Error(`stuck: ${last.map((s) => `${s.id} ${s.state}`).join(', ')}`, {
          cause: error,
        });
      }
      const settledInS = (Date.now() - settleStarted) / 1000;

      // One shard per key, none without one; every key resent once more (at the end, after
      // resizes) still answers its shard.
      const rows = await crashShards();
      assert.equal(rows.length, creates.size, 'one shard per create');
      assert.deepEqual(new Set(rows.map((r) => r.idempotency_key)), new Set(creates.keys()));
      for (const [key, id] of creates) {
        const { createShard } = await system.as<{ createShard: { id: string } }>(
          team.token,
          create,
          { input: inputOf(key) },
          2,
        );
        assert.equal(createShard.id, id, `${key} resent after the rounds`);
      }
      // Reservations, containers (at most one per shard, one running for each RUNNING shard,
      // none for a shard that should not run), usage and the other checks' shards, adopted in
      // their containers: the suite's invariants.
      await world.converged();
      const states = new Map<string, number>();
      for (const row of rows) states.set(row.state, (states.get(row.state) ?? 0) + 1);
      console.log(
        `     (seed ${seed}; kills: ${kills.join('; ')}; ${rows.length} shards: ` +
          `${[...states].map(([s, n]) => `${n} ${s}`).join(', ')}; ${resent} creates resent, ` +
          `${replayedAnswered} of them answered before; ` +
          `${[...outcomes].map(([what, n]) => `${n} ${what}`).join(', ')}; ` +
          `settled ${settledInS.toFixed(1)} s after the last restart)`,
      );

      // Deleted, so that later checks run on a lighter host b.
      for (const row of rows) {
        if (row.state === 'DELETED') continue;
        await system.as(team.token, `mutation ($id: ID!) { deleteShard(id: $id) { state } }`, {
          id: row.id,
        });
      }
      await world.converged();
    },
    150_000,
  );

  runner.check(
    'agent b killed between docker create and docker start: restarted, it runs the shard in one new container',
    async () => {
      const hostB = system.hostId('b');
      const team = world.team('vision');
      await system.agent('b').process.kill9();
      const placed = await world.createShard('vision', {
        name: 'created-never-started',
        memoryPerGpu: '512m',
        gpuModelInclude: ['L4'],
      });
      assert.equal(placed.hostId, hostB);
      assert.equal(placed.state, 'PLACED');
      // What a kill -9 between `docker create` and `docker start` leaves: the shard's
      // container, with the agent's name and labels, created and never started.
      const gpus = placed.gpus.map((gpu) => gpu.gpuUuid).join(',');
      const created = docker(
        'create',
        '--name',
        `gpushards-${hostB}-${placed.id}`,
        ...['--label', 'io.gpushards.managed=true'],
        ...['--label', `io.gpushards.shard=${placed.id}`],
        ...['--label', `io.gpushards.team=${team.id}`],
        ...['--label', `io.gpushards.host=${hostB}`],
        ...['--label', `io.gpushards.gpus=${gpus}`],
        system.image,
      );
      assert.deepEqual(
        world.containersOf(placed.id).map((c) => [c.id, c.state]),
        [[created, 'created']],
      );
      await system.restartAgent('b');
      const running = await world.waitForState('vision', placed.id, 'RUNNING');
      const containers = world.containersOf(placed.id);
      assert.deepEqual(
        containers.map((c) => [c.id, c.state]),
        [[running.containerId, 'running']],
        'one container, running, and not the one that never started',
      );
      assert.notEqual(running.containerId, created);
      world.track('vision', running);
      await world.converged();
    },
    90_000,
  );
}

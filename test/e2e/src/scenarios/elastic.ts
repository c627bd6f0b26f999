import assert from 'node:assert/strict';

import { docker } from '../support/docker.js';
import { waitFor } from '../support/processes.js';
import type { Runner } from '../support/runner.js';
import { MiB } from '../support/system.js';
import type { World } from '../support/world.js';

/**
 * Elastic memory end to end (docs/elastic.md, issue #30): the API, the queue, the real agent
 * over NATS, the Docker engine, libvgpu.so's wake gate and the fake driver's checkpoint API.
 * Host b (four L4s): every agent of the suite suspends (its default budget, half the RAM).
 */
const HOST = 'b';
const KEPT = 512 * MiB;

interface MemoryView {
  state: string;
  memory: {
    where: string;
    suspendCause: string | null;
    moved: { bytes: string } | null;
    lastError: string | null;
  };
}

const MEMORY = `query ($id: ID!) { shard(id: $id) { state
  memory { where suspendCause moved { bytes } lastError } } }`;

export function elasticChecks(runner: Runner, world: World): void {
  runner.check(
    'elastic: a suspended shard gives its GPU memory back, and a CUDA call of its process brings it back intact',
    async () => {
      const { system } = world;
      await world.createTeam('elastic', {
        maxTotal: '8g',
        maxShards: 4,
        maxPerShard: '4g',
        allowElastic: true,
      });
      const token = world.team('elastic').token;
      const memory = async (id: string) =>
        (await system.as<{ shard: MemoryView }>(token, MEMORY, { id })).shard;
      const shard = await world.runningShard('elastic', {
        name: 'notebook',
        memoryPerGpu: '2g',
        elastic: true,
        hostSelector: { tier: 'l4' },
        command: ['/e2e-probe', 'keep', String(KEPT)],
      });
      assert.equal(world.keyOf(shard.hostId), HOST);
      const kept = await waitFor(
        'the probe to fill its memory',
        () => world.probeOutput(shard.containerId).find((line) => 'kept' in line),
        15_000,
      );
      assert.deepEqual(kept, { kept: KEPT, result: 0 });
      const gpu = shard.gpus.find((g) => g.releasedAt === null)!.gpuUuid;
      const used = async () =>
        Number(
          (
            await system.query<{ used: string }>(
              'SELECT used_bytes::text AS used FROM gpu WHERE uuid = $1',
              [gpu],
            )
          )[0]!.used,
        );

      // The heartbeats count the kept memory on the card (the fake NVML, every process).
      await waitFor('the heartbeats to count the kept memory', async () => {
        const now = await world.shard('elastic', shard.id);
        const live = now.gpus.find((g) => g.releasedAt === null);
        return Number(live?.used.bytes ?? 0) >= KEPT ? true : undefined;
      });
      const resident = await used();
      assert.ok(resident >= KEPT, `the card holds ${resident}`);

      // Suspended by its owner: the memory goes to host RAM and the GPU is given back.
      await system.as(token, `mutation ($id: ID!) { suspendShard(id: $id) { state } }`, {
        id: shard.id,
      });
      await world.waitForState('elastic', shard.id, 'SUSPENDED', 30_000);
      const suspended = await memory(shard.id);
      assert.equal(suspended.memory.where, 'HOST');
      assert.equal(suspended.memory.suspendCause, 'suspend-requested');
      assert.ok(
        Number(suspended.memory.moved?.bytes ?? 0) >= KEPT,
        `moved ${suspended.memory.moved?.bytes}`,
      );
      world.ledger.set(shard.id, { state: 'SUSPENDED' });
      // Its cap stays promised on its GPU (suspended bytes), out of the reservation.
      const [row] = await system.query<{ suspended: string }>(
        'SELECT suspended_bytes::text AS suspended FROM gpu WHERE uuid = $1',
        [gpu],
      );
      assert.equal(Number(row!.suspended), Number(shard.limitPerGpu.bytes));
      // The fake card's NVML (what the heartbeats report) no longer counts the kept memory.
      await waitFor('the card to give the memory back', async () =>
        (await used()) <= resident - KEPT ? true : undefined,
      );
      // The container still runs: its process is waiting for nothing yet.
      assert.equal(docker('inspect', '-f', '{{.State.Running}}', shard.containerId), 'true');

      // Its process reads its memory: the call waits in libvgpu.so, which rings the agent; the
      // agent asks the control plane, whose queue resumes the shard; the call goes on.
      docker('kill', '--signal', 'USR1', shard.containerId);
      const poke = await waitFor(
        'the poke to be answered',
        () => world.probeOutput(shard.containerId).find((line) => 'poke' in line),
        30_000,
      );
      assert.deepEqual(poke, { poke: 1, intact: 1, result: 0 });
      await world.waitForState('elastic', shard.id, 'RUNNING', 15_000);
      world.ledger.set(shard.id, { state: 'RUNNING' });
      const back = await memory(shard.id);
      assert.equal(back.memory.where, 'GPU');
      assert.equal(back.memory.lastError, null);
      await waitFor('the card to hold the memory again', async () =>
        (await used()) >= resident ? true : undefined,
      );
      // The same container all along: the work was never restarted.
      assert.deepEqual(
        world.containersOf(shard.id).map((c) => c.id),
        [shard.containerId],
      );
      // And once more, right away: a resident shard's call does not wait.
      docker('kill', '--signal', 'USR1', shard.containerId);
      const second = await waitFor('the second poke', () =>
        world.probeOutput(shard.containerId).find((line) => line.poke === 2),
      );
      assert.deepEqual(second, { poke: 2, intact: 1, result: 0 });

      await system.as(token, `mutation ($id: ID!) { deleteShard(id: $id) { state } }`, {
        id: shard.id,
      });
      world.ledger.set(shard.id, { state: 'DELETED' });
    },
    120_000,
  );
}

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

import { docker } from '../support/docker.js';
import { REPO_ROOT } from '../support/native.js';
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

/**
 * native/'s gpushards-checkpoint on a process of a shard container, through the fake driver of
 * its host (the container's fake GPU settings, the host's side of its state file): what an agent
 * does through koffi, from a shell.
 */
function checkpointTool(world: World, hostKey: string, containerId: string, verb: string): string {
  const pid = docker('inspect', '-f', '{{.State.Pid}}', containerId);
  const env = Object.fromEntries(
    (JSON.parse(docker('inspect', '-f', '{{json .Config.Env}}', containerId)) as string[])
      .map((entry) => entry.split(/=(.*)/s, 2) as [string, string])
      .filter(([name]) => name === 'GPUSHARDS_FAKE_GPUS' || name === 'GPUSHARDS_FAKE_UUID_SEED'),
  );
  const run = spawnSync(join(REPO_ROOT, 'native/build/gpushards-checkpoint'), [verb, pid], {
    encoding: 'utf8',
    env: {
      ...env,
      PATH: process.env.PATH,
      LD_LIBRARY_PATH: join(REPO_ROOT, 'native/build/fake-driver'),
      GPUSHARDS_FAKE_STATE: join(world.system.agent(hostKey).stateDir, 'fake-gpu-state'),
    },
  });
  if (run.status !== 0) {
    throw new Error(
      `gpushards-checkpoint ${verb} ${pid}: exit ${run.status}: ${run.stdout}${run.stderr}`,
    );
  }
  return run.stdout.trim();
}

/** The probe's first JSON line that has `key` (waits for it). */
function probeLine(world: World, containerId: string, key: string, value?: number) {
  return waitFor(`the probe's ${key}`, () =>
    world
      .probeOutput(containerId)
      .find((line) => key in line && (value === undefined || line[key] === value)),
  );
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

  runner.check(
    'elastic: agent b killed mid-suspend (processes locked, memory not moved) and the command lost: restarted, it finishes the suspend; a wake then resumes it intact',
    async () => {
      const { system } = world;
      const token = world.team('elastic').token;
      const shard = await world.runningShard('elastic', {
        name: 'notebook-crash',
        memoryPerGpu: '1g',
        elastic: true,
        hostSelector: { tier: 'l4' },
        command: ['/e2e-probe', 'keep', String(KEPT)],
      });
      assert.deepEqual(await probeLine(world, shard.containerId, 'kept'), {
        kept: KEPT,
        result: 0,
      });
      await system.agent(HOST).process.kill9();
      // The control plane decides; its command finds no agent.
      const asked = await system.as<{ suspendShard: { state: string } }>(
        token,
        `mutation ($id: ID!) { suspendShard(id: $id) { state } }`,
        { id: shard.id },
      );
      assert.equal(asked.suspendShard.state, 'SUSPENDING');
      world.ledger.set(shard.id, { state: 'SUSPENDING' });
      // What an agent killed right after its lock leaves: the process locked, its memory on
      // the GPU (partial).
      assert.equal(checkpointTool(world, HOST, shard.containerId, 'lock'), 'ok');
      assert.equal(checkpointTool(world, HOST, shard.containerId, 'state'), 'locked');

      await system.restartAgent(HOST);
      await world.waitForState('elastic', shard.id, 'SUSPENDED', 45_000);
      world.ledger.set(shard.id, { state: 'SUSPENDED' });
      assert.equal(checkpointTool(world, HOST, shard.containerId, 'state'), 'checkpointed');

      docker('kill', '--signal', 'USR1', shard.containerId);
      assert.deepEqual(await probeLine(world, shard.containerId, 'poke', 1), {
        poke: 1,
        intact: 1,
        result: 0,
      });
      await world.waitForState('elastic', shard.id, 'RUNNING', 15_000);
      assert.equal(checkpointTool(world, HOST, shard.containerId, 'state'), 'running');
      assert.deepEqual(
        world.containersOf(shard.id).map((c) => c.id),
        [shard.containerId],
      );
      world.ledger.set(shard.id, { state: 'RUNNING' });
      await system.as(token, `mutation ($id: ID!) { deleteShard(id: $id) { state } }`, {
        id: shard.id,
      });
      world.ledger.set(shard.id, { state: 'DELETED' });
      await world.converged();
    },
    150_000,
  );
}

import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { ShardLaunchSpec } from '@gpushards/protocol';

import type { Agent } from '../create-agent.js';
import type { ScriptedControlPlane } from '../testing/control-plane-peer.js';
import { startDockerAgent, type DockerAgentStack } from '../testing/docker-agent.js';
import { docker } from '../testing/docker.js';
import { fakeLibraries, nativeArtifacts } from '../testing/native.js';
import { waitFor } from '../testing/processes.js';
import { namespacedProcess } from '../compute/process-launches.js';
import { containerPids } from './container-memory.js';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const HOST = `memory-failures-${process.pid}`;
const IMAGE = `gpushards-test/memory-failures-probe:${process.pid}`;
const KEPT = 256 * MiB;
/** Conditions, not sleeps: generous for a loaded CI machine (a lock waits 10 s). */
const WAIT_MS = 30_000;

/**
 * Moves the driver refuses, in the real Docker engine with the fake driver (docs/elastic.md,
 * "What cannot be suspended"): the agent undoes what it had moved, says why, and every process
 * goes on with its data where the move started from.
 */
describe('elastic memory: moves the driver refuses (Docker)', () => {
  let stack: DockerAgentStack | undefined;
  let controlPlane: ScriptedControlPlane;
  let agent: Agent;
  let gpu0 = '';
  const children: ChildProcess[] = [];

  before(async () => {
    stack = await startDockerAgent({
      hostId: HOST,
      image: IMAGE,
      stateDir: mkdtempSync(join(tmpdir(), 'gpushards-memory-failures-')),
      gpus: '1xTest GPU:8g',
      options: { suspendBudget: { bytes: 4 * GiB } },
    });
    ({ controlPlane, agent } = stack);
    [gpu0 = ''] = agent.inventory.gpus.map((gpu) => gpu.uuid);
  });

  after(async () => {
    for (const child of children) child.kill('SIGKILL');
    await stack?.stop();
  });

  async function launch(shardId: string, processes: number): Promise<string> {
    const shard: ShardLaunchSpec = {
      shardId,
      teamId: 'team-failures',
      name: shardId,
      image: IMAGE,
      env: {},
      gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
      capPolicy: 'kill',
      command: ['/cuda-probe', 'keep', String(KEPT), String(processes)],
    };
    const launched = await controlPlane.command(HOST, { type: 'launch', shard });
    assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
    const containerId = launched.result.containerId!;
    await lines(containerId, 'kept', KEPT, processes);
    return containerId;
  }

  /** Waits for one probe line per process with `key` = `value`. */
  function lines(containerId: string, key: string, value: number, processes: number) {
    return waitFor(`${processes} processes to print ${key} ${value}`, () => {
      const found = docker('logs', containerId)
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, number>)
        .filter((line) => line[key] === value);
      return found.length === processes ? found : undefined;
    });
  }

  async function pokeIntact(containerId: string, poke: number, processes: number) {
    docker('kill', '--signal', 'USR1', containerId);
    for (const line of await lines(containerId, 'poke', poke, processes)) {
      assert.deepEqual([line.intact, line.result], [1, 0]);
    }
  }

  /** A program's stdout, collected, and a wait for a word in it. */
  function started(command: string, args: string[], env?: NodeJS.ProcessEnv) {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'], env });
    children.push(child);
    let said = '';
    child.stdout!.on('data', (chunk) => (said += chunk));
    const says = (word: string) =>
      waitFor(`${command} ${args.join(' ')} to say ${word}`, () =>
        said.includes(word) ? true : undefined,
      );
    return { child, says };
  }

  /** Where the agent's next reconcile request says the shard's memory is. */
  async function reconciledMemory(shardId: string) {
    const before = controlPlane.reconciles.length;
    await agent.reconcileNow();
    const request = await waitFor('the reconcile request', () => controlPlane.reconciles[before]);
    return request.containers.find((c) => c.shardId === shardId)?.memory;
  }

  it('a suspend of a container with a process in a CUDA call longer than the lock waits ends SUSPEND_FAILED with the reason, every process running on', async () => {
    const shard = await launch('f-stuck', 1);
    // A second process of the container, in a kernel of ten minutes on the fake card.
    const stuck = started('docker', [
      'exec',
      '-e',
      'GPUSHARDS_FAKE_KERNEL_US=600000000',
      shard,
      '/cuda-probe',
      'stuck',
    ]);
    await stuck.says('{"syncing":1}');
    const init = Number(docker('inspect', '-f', '{{.State.Pid}}', shard));
    const pid = await waitFor('it asleep in cuEventSynchronize', () => {
      const other = containerPids('/proc', new Set([shard]))
        .get(shard)
        ?.find((p) => p !== init);
      return other !== undefined && processState(other) === 'S' ? other : undefined;
    });

    const before = controlPlane.states.length;
    const taken = await controlPlane.command(HOST, {
      type: 'suspend',
      shardId: 'f-stuck',
      cause: 'suspend-requested',
    });
    assert.ok(taken.ok, JSON.stringify(taken));
    const failed = await controlPlane.waitForState('f-stuck', 'SUSPEND_FAILED', WAIT_MS, before);
    assert.match(
      failed.reason ?? '',
      new RegExp(
        `^suspend failed: cuCheckpointProcessLock\\(pid ${pid}\\) returned CUDA_ERROR_NOT_READY .*: the process did not let go of the GPU in time .*; its memory is back on the GPU$`,
      ),
    );
    assert.equal(
      controlPlane.statesOf('f-stuck').some((e) => e.state === 'SUSPENDED'),
      false,
    );
    // Nothing moved or stays locked: the other process reads its memory at once.
    assert.equal(await reconciledMemory('f-stuck'), 'resident');
    await pokeIntact(shard, 1, 1);
    assert.match(
      await agent.metrics(),
      /^gpushards_agent_memory_moves_total\{direction="suspend",cause="suspend-requested",outcome="failed"\} 1$/m,
    );
    docker('rm', '-f', shard);
  });

  it('a suspend of a shard whose process holds a CUDA IPC import is refused before anything moves, saying why; once that process is gone it suspends and resumes', async () => {
    const shard: ShardLaunchSpec = {
      shardId: 'f-ipc',
      teamId: 'team-failures',
      name: 'f-ipc',
      image: IMAGE,
      env: {},
      gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
      capPolicy: 'kill',
      command: ['/cuda-probe', 'share', String(KEPT)],
    };
    const launched = await controlPlane.command(HOST, { type: 'launch', shard });
    assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
    const containerId = launched.result.containerId!;
    await lines(containerId, 'exported', KEPT, 1);
    const [imported] = await lines(containerId, 'imported', 1, 1);
    assert.equal(imported!.result, 0);
    const importer = await waitFor('the importer by its host pid', () =>
      containerPids('/proc', new Set([containerId]))
        .get(containerId)
        ?.find((pid) => namespacedProcess('/proc', pid)?.nsPid === imported!.pid),
    );

    const before = controlPlane.states.length;
    const refused = await controlPlane.command(HOST, {
      type: 'suspend',
      shardId: 'f-ipc',
      cause: 'make-room',
    });
    assert.ok(!refused.ok, JSON.stringify(refused));
    assert.equal(refused.error.code, 'NOT_SUSPENDABLE');
    assert.match(
      refused.error.message,
      new RegExp(
        `shard f-ipc cannot be suspended: process ${importer} \\(pid ${imported!.pid} in its container\\) holds GPU memory another process shared with it`,
      ),
    );
    const failed = await controlPlane.waitForState('f-ipc', 'SUSPEND_FAILED', WAIT_MS, before);
    assert.match(failed.reason ?? '', /^suspend refused: .*CUDA IPC/);
    // Nothing was locked or moved: both processes run on, their memory on the GPU.
    assert.equal(await reconciledMemory('f-ipc'), 'resident');
    assert.match(
      await agent.metrics(),
      /^gpushards_agent_memory_moves_total\{direction="suspend",cause="make-room",outcome="refused"\} 1$/m,
    );

    // SIGKILLed: no destructor runs, its mark stays in the region, and names nobody alive.
    process.kill(importer, 'SIGKILL');
    await waitFor('the importer gone', () =>
      containerPids('/proc', new Set([containerId]))
        .get(containerId)
        ?.includes(importer) === false
        ? true
        : undefined,
    );
    const again = controlPlane.states.length;
    assert.ok(
      (await controlPlane.command(HOST, { type: 'suspend', shardId: 'f-ipc', cause: 'make-room' }))
        .ok,
    );
    await controlPlane.waitForState('f-ipc', 'SUSPENDED', WAIT_MS, again);
    const back = controlPlane.states.length;
    assert.ok((await controlPlane.command(HOST, { type: 'resume', shardId: 'f-ipc' })).ok);
    await controlPlane.waitForState('f-ipc', 'RESUMED', WAIT_MS, back);
    docker('rm', '-f', containerId);
  });

  it('a resume onto a card without room for every process ends RESUME_FAILED: the one restored goes back to host RAM; once there is room it resumes intact', async () => {
    const shard = await launch('f-notebook', 2);
    const before = controlPlane.states.length;
    assert.ok(
      (
        await controlPlane.command(HOST, {
          type: 'suspend',
          shardId: 'f-notebook',
          cause: 'make-room',
        })
      ).ok,
    );
    const suspended = await controlPlane.waitForState('f-notebook', 'SUSPENDED', WAIT_MS, before);
    const each = suspended.moved!.bytes / 2;
    // Outside any shard, something takes all the card has left but room for one process.
    const beatsAt = controlPlane.heartbeats.length;
    const beat = await waitFor('a heartbeat', () => controlPlane.heartbeats[beatsAt]);
    const free = 8 * GiB - beat.gpus[0]!.usedBytes;
    const grab = started(
      nativeArtifacts().find('fake-hidden-alloc'),
      ['0', String(free - each - 64 * MiB), 'hold'],
      { ...process.env, LD_LIBRARY_PATH: fakeLibraries().dir },
    );
    await grab.says('holding');

    const resumeAt = controlPlane.states.length;
    assert.ok((await controlPlane.command(HOST, { type: 'resume', shardId: 'f-notebook' })).ok);
    const failed = await controlPlane.waitForState(
      'f-notebook',
      'RESUME_FAILED',
      WAIT_MS,
      resumeAt,
    );
    assert.match(
      failed.reason ?? '',
      /^resume failed: cuCheckpointProcessRestore\(pid \d+\) returned CUDA_ERROR_OUT_OF_MEMORY .*: its GPU has no room for its memory now .*; its memory stays in host RAM$/,
    );
    // Half of it had moved back: the undo checkpointed it again.
    const progress = controlPlane.states
      .slice(resumeAt)
      .filter((e) => e.shardId === 'f-notebook' && e.state === 'RESUMING')
      .map((e) => e.progress?.completedBytes);
    assert.deepEqual(progress, [0, each]);
    assert.equal(await reconciledMemory('f-notebook'), 'suspended');

    grab.child.kill('SIGKILL');
    await new Promise((resolve) => grab.child.once('exit', resolve));
    const againAt = controlPlane.states.length;
    assert.ok((await controlPlane.command(HOST, { type: 'resume', shardId: 'f-notebook' })).ok);
    const resumed = await controlPlane.waitForState('f-notebook', 'RESUMED', WAIT_MS, againAt);
    assert.deepEqual(
      { bytes: resumed.moved?.bytes, processes: resumed.moved?.processes },
      { bytes: 2 * each, processes: 2 },
    );
    await pokeIntact(shard, 1, 2);
  });
});

/** A process's state letter in /proc (S: asleep). */
function processState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return undefined;
  }
}

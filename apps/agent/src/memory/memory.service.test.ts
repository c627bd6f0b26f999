import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';

import type { MoveDirection, ProcessCheckpointState } from '@gpushards/limits';

import type { AgentConfig } from '../config/agent-options.js';
import type { GpusService } from '../gpus/gpus.service.js';
import { LimitsService } from '../limits/limits.service.js';
import { createLogger } from '../logging/logger.js';
import { AgentMetrics } from '../metrics/agent-metrics.js';
import type { RegionWatchService } from '../regions/region-watch.service.js';
import { RegionsService } from '../regions/regions.service.js';
import { MemoryCommands } from '../shards/memory-commands.js';
import { NotSuspendableError, type ShardRecord } from '../shards/shard-record.js';
import { ShardRegistry } from '../shards/shard-registry.js';
import type { ShardsService } from '../shards/shards.service.js';
import type { StateDetails, StateReporter } from '../shards/state-reporter.js';
import { StandInDriver } from '../testing/checkpoint-stand-in.js';
import { buildRegion, type FixtureProcess } from '../testing/region-fixture.js';
import { MemoryService } from './memory.service.js';

const GiB = 1024 ** 3;
const GPU = 'GPU-fa4e5000-0000-4000-8000-000000000000';
const work = mkdtempSync(join(tmpdir(), 'gpushards-memory-'));
after(() => rmSync(work, { recursive: true, force: true }));

/**
 * MemoryService between the command and the driver: a driver stand-in (the fake driver's end
 * to end is memory.docker.test.ts), a /proc of cgroup files, real limits files.
 */
async function setUp(
  name: string,
  states: Record<number, ProcessCheckpointState>,
  budget = 8 * GiB,
) {
  const root = join(work, name);
  const procRoot = join(root, 'proc');
  const regionRoot = join(root, 'regions');
  const containerId = name.padEnd(64, '0').replace(/[^0-9a-f]/g, 'a');
  for (const pid of [...Object.keys(states), '999']) {
    mkdirSync(join(procRoot, pid), { recursive: true });
    // 999: a process of the container the driver does not know (a shell).
    writeFileSync(join(procRoot, pid, 'cgroup'), `12:pids:/docker/${containerId}\n`);
  }
  const config = {
    hostId: 'box-1',
    stateDir: root,
    computeTurns: 'gpu',
    enforcement: { intervalMs: 50, procRoot },
    regionRoot,
  } as unknown as AgentConfig;
  const logger = createLogger('silent', 'box-1');
  const driver = new StandInDriver(states);
  const limits = new LimitsService(config, logger);
  await limits.prepare('s', [{ uuid: GPU, limitBytes: 2 * GiB }], 0, 'kill');
  const record: ShardRecord = {
    shardId: 's',
    teamId: 't',
    containerId,
    state: 'RUNNING',
    observed: 'running',
    gpuUuids: [GPU],
  };
  const events: { state: string; details: StateDetails }[] = [];
  const shards = {
    get: (shardId: string) => (shardId === 's' ? record : undefined),
    list: () => [record],
    reportMemory: (_shardId: string, state: string, details: StateDetails = {}) => {
      events.push({ state, details });
      return Promise.resolve();
    },
  } as unknown as ShardsService;
  const gpus = {
    processes: () =>
      Object.keys(states).map((pid) => ({ gpuUuid: GPU, pid: Number(pid), bytes: 100 })),
  } as unknown as GpusService;
  const metrics = new AgentMetrics();
  const memory = new MemoryService(
    config,
    { kind: 'available', api: driver, budgetBytes: budget },
    shards,
    limits,
    gpus,
    new RegionsService(config, {} as RegionWatchService, logger),
    metrics,
    new MemoryCommands(new ShardRegistry({} as StateReporter)),
    logger,
  );
  /** The shard's region file, as libvgpu.so in its container would have written it. */
  const region = (processes: FixtureProcess[]) => {
    mkdirSync(join(regionRoot, 's'), { recursive: true });
    writeFileSync(
      join(regionRoot, 's', 'region'),
      buildRegion([{ uuid: GPU }], undefined, processes),
    );
  };
  /** What /proc says of a host pid: its pid in the container and its start time. */
  const inContainer = (hostPid: number, nsPid: number, startTime: number) => {
    writeFileSync(
      join(procRoot, String(hostPid), 'status'),
      `Name:\tpython\nNSpid:\t${hostPid}\t${nsPid}\n`,
    );
    const fields = Array.from({ length: 20 }, (_, i) => (i === 19 ? String(startTime) : '0'));
    writeFileSync(
      join(procRoot, String(hostPid), 'stat'),
      `${hostPid} (python) ${fields.join(' ')}\n`,
    );
  };
  const ended = (direction: MoveDirection) =>
    new Promise<boolean>((resolve) =>
      memory.onMoveEnd((_shardId, moved, ok) => {
        if (moved === direction) resolve(ok);
      }),
    );
  return { memory, driver, limits, record, events, metrics, ended, region, inContainer, procRoot };
}

describe('MemoryService', () => {
  it('suspend: answered at once with where the memory was, then SUSPENDING with progress and SUSPENDED with what moved; resume brings it back', async () => {
    const { memory, driver, limits, events, metrics, ended } = await setUp('moves', {
      11: 'running',
      12: 'running',
    });
    const suspended = ended('suspend');
    assert.equal(await memory.suspend('s', 'idle-suspend'), 'resident');
    assert.equal(await memory.suspend('s', 'idle-suspend'), 'resident', 'a repeat joins');
    assert.equal(await suspended, true);
    assert.equal(driver.calls.filter((c) => c.startsWith('lock')).length, 2, 'one move');
    assert.equal(await limits.memory('s'), 'suspended');
    assert.deepEqual(
      events.map((e) => e.state),
      ['SUSPENDING', 'SUSPENDING', 'SUSPENDING', 'SUSPENDED'],
    );
    assert.deepEqual(events[0]!.details.progress, { completedBytes: 0, totalBytes: 200 });
    assert.deepEqual(events[2]!.details.progress, { completedBytes: 200, totalBytes: 200 });
    assert.equal(events[3]!.details.moved?.bytes, 200);
    assert.equal(events[3]!.details.moved?.processes, 2);
    assert.deepEqual(memory.memoryOf('s'), { memory: 'suspended', suspendedBytes: 200 });
    // Already there: answered at once, and told again.
    assert.equal(await memory.suspend('s', 'suspend-requested'), 'suspended');
    assert.equal(events.at(-1)!.state, 'SUSPENDED');
    const resumed = ended('resume');
    assert.equal(await memory.resume('s'), 'suspended');
    assert.equal(await resumed, true);
    assert.equal(events.at(-1)!.state, 'RESUMED');
    assert.equal(await limits.memory('s'), 'resident');
    assert.deepEqual(memory.memoryOf('s'), { memory: 'resident' });
    const text = await metrics.text();
    assert.match(
      text,
      /gpushards_agent_memory_moves_total\{direction="suspend",cause="idle-suspend",outcome="ok"\} 1/,
    );
    assert.match(
      text,
      /gpushards_agent_memory_moves_total\{direction="resume",cause="resume-requested",outcome="ok"\} 1/,
    );
    assert.match(text, /gpushards_agent_memory_moved_bytes_total\{direction="suspend"\} 200/);
    await limits.onModuleDestroy();
  });

  it('a failed suspend is SUSPEND_FAILED with the reason; the memory is back on the GPU', async () => {
    const { memory, driver, limits, events, ended } = await setUp('fails', {
      21: 'running',
      22: 'running',
    });
    driver.fail('checkpoint', 22, 'CUDA_ERROR_NOT_SUPPORTED');
    const done = ended('suspend');
    await memory.suspend('s', 'reclaim');
    assert.equal(await done, false);
    const failed = events.at(-1)!;
    assert.equal(failed.state, 'SUSPEND_FAILED');
    assert.match(
      failed.details.reason!,
      /^suspend failed: cuCheckpointProcessCheckpoint\(pid 22\) returned CUDA_ERROR_NOT_SUPPORTED/,
    );
    assert.equal(await limits.memory('s'), 'resident');
    assert.deepEqual(memory.memoryOf('s'), { memory: 'resident' });
    await limits.onModuleDestroy();
  });

  it('refuses what the host cannot do: past the budget, a container that does not run, a process the driver failed', async () => {
    const small = await setUp('budget', { 31: 'running' }, GiB);
    await assert.rejects(
      small.memory.suspend('s', 'make-room'),
      (error: unknown) =>
        error instanceof NotSuspendableError &&
        /budget for suspended shards \(1 GiB\) has 1 GiB left; shard s's caps are 2 GiB/.test(
          error.message,
        ),
    );
    assert.match(
      await small.metrics.text(),
      /gpushards_agent_memory_moves_total\{direction="suspend",cause="make-room",outcome="refused"\} 1/,
    );
    assert.deepEqual(small.driver.calls, []);
    small.record.observed = 'exited';
    await assert.rejects(small.memory.resume('s'), /container is not running/);
    await assert.rejects(small.memory.suspend('nope'), /not on host box-1/);
    await small.limits.onModuleDestroy();
    const failed = await setUp('failed', { 32: 'running', 33: 'failed' });
    await assert.rejects(
      failed.memory.suspend('s', 'suspend-requested'),
      (error: unknown) =>
        error instanceof NotSuspendableError &&
        /^the driver failed process 33 of shard s \(CU_PROCESS_STATE_FAILED/.test(error.message),
    );
    assert.deepEqual(failed.driver.calls, [], 'nothing moved');
    assert.equal(await failed.limits.memory('s'), 'resident');
    await failed.limits.onModuleDestroy();
  });

  it('refuses, before any lock, a suspend of a shard whose live process holds a CUDA IPC import, and says SUSPEND_FAILED why', async () => {
    const { memory, driver, limits, events, metrics, ended, region, inContainer, procRoot } =
      await setUp('ipc', { 51: 'running', 52: 'running' });
    inContainer(51, 7, 777);
    inContainer(52, 8, 888);
    region([
      { pid: 7, startTime: 777n, ipcImports: true },
      { pid: 8, startTime: 888n },
    ]);
    await assert.rejects(
      memory.suspend('s', 'make-room'),
      (error: unknown) =>
        error instanceof NotSuspendableError &&
        /^shard s cannot be suspended: process 51 \(pid 7 in its container\) holds GPU memory another process shared with it \(CUDA IPC/.test(
          error.message,
        ) &&
        /would hang for good/.test(error.message) &&
        /keeps running on its GPU\. To make it suspendable, close those imports/.test(
          error.message,
        ),
    );
    assert.deepEqual(driver.calls, [], 'nothing locked');
    assert.equal(await limits.memory('s'), 'resident');
    assert.deepEqual(
      events.map((e) => e.state),
      ['SUSPEND_FAILED'],
    );
    assert.match(
      events[0]!.details.reason!,
      /^suspend refused: shard s cannot be suspended: .*CUDA IPC/,
    );
    assert.match(
      await metrics.text(),
      /gpushards_agent_memory_moves_total\{direction="suspend",cause="make-room",outcome="refused"\} 1/,
    );
    // A marked slot whose process has exited (a zombie its parent has not reaped) or that no
    // process of the container has (SIGKILLed, its slot not reclaimed yet) is nobody.
    writeFileSync(
      join(procRoot, '51', 'status'),
      'Name:\tpython\nState:\tZ (zombie)\nNSpid:\t51\t7\n',
    );
    region([
      { pid: 7, startTime: 777n, ipcImports: true },
      { pid: 8, startTime: 888n },
      { pid: 9, startTime: 999n, ipcImports: true },
    ]);
    const done = ended('suspend');
    assert.equal(await memory.suspend('s', 'make-room'), 'resident');
    assert.equal(await done, true);
    assert.equal(await limits.memory('s'), 'suspended');
    await limits.onModuleDestroy();
  });

  it('an import opened between the check and the locks stops the suspend before any checkpoint, undone', async () => {
    const { memory, driver, limits, events, ended, region, inContainer } = await setUp('ipc-late', {
      61: 'running',
      62: 'running',
    });
    inContainer(61, 3, 333);
    inContainer(62, 4, 444);
    region([
      { pid: 3, startTime: 333n },
      { pid: 4, startTime: 444n },
    ]);
    driver.after = (call) => {
      if (call === 'lock 61')
        region([
          { pid: 3, startTime: 333n, ipcImports: true },
          { pid: 4, startTime: 444n },
        ]);
    };
    const done = ended('suspend');
    assert.equal(await memory.suspend('s', 'reclaim'), 'resident');
    assert.equal(await done, false);
    assert.ok(!driver.calls.some((call) => call.startsWith('checkpoint')), driver.calls.join(', '));
    assert.deepEqual([...driver.states.values()], ['running', 'running'], 'unlocked again');
    assert.equal(await limits.memory('s'), 'resident');
    const failed = events.at(-1)!;
    assert.equal(failed.state, 'SUSPEND_FAILED');
    assert.match(
      failed.details.reason!,
      /^suspend failed: shard s cannot be suspended: process 61 \(pid 3/,
    );
    await limits.onModuleDestroy();
  });

  it('a suspend of a shard half moved (a lost host back SUSPENDING) finishes it: only what is left on the GPU moves, then SUSPENDED', async () => {
    const { memory, driver, limits, events, ended } = await setUp('half', {
      51: 'checkpointed',
      52: 'running',
    });
    await limits.setMemory('s', 'suspended');
    const suspended = ended('suspend');
    assert.equal(await memory.suspend('s', 'suspend-requested'), 'partial');
    assert.equal(await suspended, true);
    assert.deepEqual(
      driver.calls.filter((c) => c.startsWith('checkpoint')),
      ['checkpoint 52'],
    );
    assert.equal(await limits.memory('s'), 'suspended');
    assert.equal(events.at(-1)!.state, 'SUSPENDED');
    assert.equal(events.at(-1)!.details.moved?.processes, 1);
    assert.equal(memory.memoryOf('s')?.memory, 'suspended');
    await limits.onModuleDestroy();
  });

  it('reads where memory is from the driver and the file: a suspend the agent did not finish is partial', async () => {
    const { memory, limits } = await setUp('observe', { 41: 'locked', 42: 'running' });
    await limits.setMemory('s', 'suspended');
    assert.deepEqual([...(await memory.observeAll())!], [['s', 'partial']]);
    assert.deepEqual(memory.memoryOf('s'), { memory: 'partial' });
    await limits.onModuleDestroy();
  });
});

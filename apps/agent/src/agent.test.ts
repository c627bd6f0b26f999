import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { ShardLaunchSpec } from '@gpushards/protocol';
import { pino } from 'pino';

import { createAgent, type Agent } from './create-agent.js';
import { parseSimulatedGpus } from './gpus/simulated-gpus.js';
import { decodeLimits } from './limits/limits-file.js';
import { RegistrationRejectedError } from './reconcile/agent.service.js';
import { readRegion } from './regions/region-file.js';
import { ScriptedControlPlane } from './testing/control-plane-peer.js';
import {
  cleanUpDocker,
  docker,
  importCudaProbeImage,
  importWorkloadImage,
  shardContainers,
} from './testing/docker.js';
import { startNatsServer, type TestNatsServer } from './testing/nats-server.js';
import { fakeGpuUuid, fakeLibraries, nativeArtifacts } from './testing/native.js';
import { waitFor } from './testing/processes.js';
import { buildRegion } from './testing/region-fixture.js';
import { startRegistry, type TestRegistry } from './testing/registry.js';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const HOST = `agent-test-${process.pid}`;
const IMAGE = `gpushards-test/workload:${process.pid}`;
const CUDA_IMAGE = `gpushards-test/cuda-probe:${process.pid}`;
const TEAM = 'team-vision';

/**
 * The agent against real parts: a nats-server with deploy/nats's permissions, the Docker
 * engine, libvgpu.so; a scripted control plane speaks libs/protocol on the other side.
 */
describe('agent', () => {
  let nats: TestNatsServer;
  let controlPlane: ScriptedControlPlane;
  let registry: TestRegistry | undefined;
  let agent: Agent | undefined;
  const stateDir = mkdtempSync(join(tmpdir(), 'gpushards-agent-'));
  const images = [IMAGE, CUDA_IMAGE];
  let gpu0 = '';
  let gpu1 = '';

  function startAgent(): Promise<Agent> {
    return createAgent({
      hostId: HOST,
      hostName: 'test box',
      labels: { zone: 'test' },
      link: { nats: { servers: [nats.url], auth: nats.agent(HOST), requestTimeoutMs: 5000 } },
      gpus: {
        kind: 'simulated',
        gpus: parseSimulatedGpus('2xTest GPU:24g'),
        fakeLibraryDir: fakeLibraries().dir,
      },
      interposerPath: nativeArtifacts().interposer,
      stateDir,
      heartbeatSeconds: 1,
      reconcileSeconds: 3600,
      stopGraceSeconds: 1,
      suspendBudget: { bytes: 8 * GiB },
      logLevel: (process.env.GPUSHARDS_TEST_LOG as 'debug' | undefined) ?? 'silent',
      logDestination: pino.destination(2),
    });
  }

  const spec = (shardId: string, extra: Partial<ShardLaunchSpec> = {}): ShardLaunchSpec => ({
    shardId,
    teamId: TEAM,
    name: `test ${shardId}`,
    image: IMAGE,
    env: {},
    gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
    ...extra,
  });

  const regionDir = (shardId: string) => join(stateDir, 'regions', shardId);
  const limitsFile = (shardId: string) => join(stateDir, 'limits', shardId);
  const limitOf = (shardId: string) =>
    decodeLimits(readFileSync(limitsFile(shardId)))[0]?.limitBytes;
  const inspect = (id: string) => JSON.parse(docker('inspect', id))[0];

  before(async () => {
    importWorkloadImage(IMAGE);
    importCudaProbeImage(CUDA_IMAGE, fakeLibraries().cuda, nativeArtifacts().interposer);
    nats = await startNatsServer([HOST]);
    controlPlane = await ScriptedControlPlane.connect(nats.url, nats.controlPlane);
    agent = await startAgent();
    [gpu0 = '', gpu1 = ''] = agent.inventory.gpus.map((gpu) => gpu.uuid);
  });

  after(async () => {
    await agent?.stop();
    await controlPlane?.close();
    await nats?.stop();
    await registry?.stop();
    cleanUpDocker([HOST], images);
    rmSync(stateDir, { recursive: true, force: true });
  });

  it('registers its host and GPUs', () => {
    const register = controlPlane.registers.at(-1);
    assert.ok(register);
    assert.equal(register.hostId, HOST);
    // Measured through the fake libcuda, which charges 300 MiB per context.
    assert.deepEqual(register.host, {
      hostId: HOST,
      name: 'test box',
      labels: { zone: 'test' },
      agentVersion: '0.1.0',
      driverVersion: '580.159.04',
      cudaVersion: '13.0',
      simulated: true,
      contextOverheadBytes: 300 * MiB,
      // The fake libcuda has the checkpoint API: this host suspends, within its budget.
      suspendBudgetBytes: 8 * GiB,
    });
    assert.deepEqual(
      register.gpus.map((gpu) => [gpu.index, gpu.uuid, gpu.model, gpu.totalBytes, gpu.usedBytes]),
      [
        [0, fakeGpuUuid(HOST, 0), 'Test GPU', 24 * GiB, 0],
        [1, fakeGpuUuid(HOST, 1), 'Test GPU', 24 * GiB, 0],
      ],
    );
    assert.deepEqual(register.runningShards, []);
    assert.deepEqual(controlPlane.problems, []);
  });

  it('sends heartbeats on its interval', async () => {
    const first = controlPlane.heartbeats.length;
    await waitFor(
      'two heartbeats',
      () => (controlPlane.heartbeats.length >= first + 2 ? true : undefined),
      5000,
    );
    const [a, b] = controlPlane.heartbeats.slice(first);
    assert.equal(b!.sequence, a!.sequence + 1);
    assert.deepEqual(
      a!.gpus.map((gpu) => gpu.uuid),
      [gpu0, gpu1],
    );
  });

  it('launches a shard: RUNNING, confined as specified, reserved env stripped', async () => {
    const reply = await controlPlane.command(HOST, {
      type: 'launch',
      shard: spec('s-main', {
        env: {
          HF_HOME: '/cache/hf',
          LD_PRELOAD: '/evil.so',
          NVIDIA_VISIBLE_DEVICES: 'all',
          CUDA_DEVICE_MEMORY_LIMIT_0: '999g',
          GPUSHARDS_REGION_PATH: '/tmp/elsewhere',
        },
        gpus: [
          { uuid: gpu1, limitBytes: 3 * GiB + 5 },
          { uuid: gpu0, limitBytes: 2 * GiB },
        ],
      }),
    });
    assert.ok(reply.ok, JSON.stringify(reply));
    assert.equal(reply.result.type, 'launch');
    assert.ok(reply.result.type === 'launch' && reply.result.state === 'RUNNING');
    const containerId = reply.result.containerId!;
    const running = await controlPlane.waitForState('s-main', 'RUNNING');
    assert.equal(running.containerId, containerId);
    assert.deepEqual(
      controlPlane.statesOf('s-main').map((event) => event.state),
      ['STARTING', 'RUNNING'],
    );

    const container = inspect(containerId);
    assert.equal(container.State.Running, true);
    assert.deepEqual(container.Config.Labels, {
      'io.gpushards.managed': 'true',
      'io.gpushards.shard': 's-main',
      'io.gpushards.team': TEAM,
      'io.gpushards.host': HOST,
      'io.gpushards.gpus': `${gpu0},${gpu1}`,
    });
    const env = new Map<string, string>(
      container.Config.Env.map((entry: string) => [
        entry.slice(0, entry.indexOf('=')),
        entry.slice(entry.indexOf('=') + 1),
      ]),
    );
    // CUDA ordinals follow host index order: GPU 0 is ordinal 0 whatever order the spec lists.
    assert.equal(env.get('CUDA_DEVICE_MEMORY_LIMIT_0'), String(2 * GiB));
    assert.equal(env.get('CUDA_DEVICE_MEMORY_LIMIT_1'), String(3 * GiB + 5));
    assert.equal(env.get('NVIDIA_VISIBLE_DEVICES'), `${gpu0},${gpu1}`);
    assert.equal(env.get('GPUSHARDS_REGION_PATH'), '/run/gpushards/region');
    assert.equal(env.get('HF_HOME'), '/cache/hf');
    assert.equal(env.has('LD_PRELOAD'), false);
    // Simulated: the fake driver shows only the shard's GPUs, in the same order.
    assert.equal(env.get('CUDA_VISIBLE_DEVICES'), `${gpu0},${gpu1}`);
    const mounts = new Map<string, { Source: string; RW: boolean }>(
      container.Mounts.map((mount: { Destination: string; Source: string; RW: boolean }) => [
        mount.Destination,
        mount,
      ]),
    );
    assert.equal(mounts.get('/usr/lib/gpushards/libvgpu.so')?.RW, false);
    assert.equal(mounts.get('/usr/lib/gpushards/libvgpu.so')?.Source, nativeArtifacts().interposer);
    assert.equal(mounts.get('/etc/ld.so.preload')?.RW, false);
    assert.equal(mounts.get('/run/gpushards')?.Source, regionDir('s-main'));
    assert.equal(mounts.get('/run/gpushards')?.RW, true);
    // The caps live where only the agent writes: its limits file, mounted read-only.
    assert.equal(mounts.get('/etc/gpushards/limits')?.Source, limitsFile('s-main'));
    assert.equal(mounts.get('/etc/gpushards/limits')?.RW, false);
    assert.deepEqual(container.HostConfig.CapDrop, ['ALL']);
    assert.equal(container.HostConfig.PidsLimit, 4096);
    // Simulated GPUs: the fake driver where the real one would be, its state shared.
    assert.equal(mounts.get('/usr/lib/x86_64-linux-gnu/libcuda.so.1')?.RW, false);
    assert.equal(mounts.get('/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1')?.RW, false);
    assert.equal(mounts.get('/run/gpushards-fake/state')?.Source, join(stateDir, 'fake-gpu-state'));
    assert.equal(env.get('GPUSHARDS_FAKE_STATE'), '/run/gpushards-fake/state');
    assert.equal(container.HostConfig.Privileged, false);
    assert.deepEqual(container.HostConfig.SecurityOpt, ['no-new-privileges']);
    // Simulated GPUs: no NVIDIA runtime request (there is none to serve it).
    assert.equal(container.HostConfig.DeviceRequests, null);
    assert.equal(docker('exec', containerId, '/workload', 'exit', '0'), '');
  });

  it('answers a retried command from its journal; a new launch of a running shard starts nothing and tells RUNNING again', async () => {
    const commandId = randomUUID();
    const body = { type: 'launch', shard: spec('s-retry') } as const;
    const first = await controlPlane.command(HOST, body, commandId);
    const again = await controlPlane.command(HOST, body, commandId);
    assert.deepEqual(again, first);
    const running = () =>
      controlPlane.statesOf('s-retry').filter((event) => event.state === 'RUNNING');
    assert.equal(running().length, 1, 'the retried command id was answered from the journal');
    const since = controlPlane.states.length;
    const relaunch = await controlPlane.command(HOST, body);
    assert.ok(first.ok && relaunch.ok);
    assert.deepEqual(relaunch.result, first.result);
    assert.equal(shardContainers(HOST).filter((c) => c.shardId === 's-retry').length, 1);
    // Told again (a control plane that restarted resends launches in flight, and the first
    // RUNNING may have gone to no one), in the same container.
    const told = await controlPlane.waitForState('s-retry', 'RUNNING', 10_000, since);
    assert.equal(
      told.containerId,
      first.ok && first.result.type === 'launch' ? first.result.containerId : '',
    );
    assert.equal(running().length, 2);
  });

  it('a reconcile command: taken on at once, and a reconcile follows now, not at the next period', async () => {
    const before = controlPlane.reconciles.length;
    const reply = await controlPlane.command(HOST, { type: 'reconcile' });
    assert.deepEqual(reply.ok && reply.result, { type: 'reconcile' });
    const request = await waitFor(
      'a reconcile request',
      () => controlPlane.reconciles[before],
      10_000,
    );
    assert.equal(request.hostId, HOST);
    assert.ok(request.containers.some((c) => c.shardId === 's-retry' && c.running));
  });

  it('reports the used bytes of the region file in heartbeats', async () => {
    writeFileSync(
      join(regionDir('s-main'), 'region'),
      buildRegion([
        { uuid: gpu0, limitBytes: 2 * GiB, usedBytes: 123 * MiB, totalBytes: 24 * GiB },
      ]),
    );
    const heartbeat = await waitFor('a heartbeat with the region usage', () =>
      controlPlane.heartbeats.find((beat) =>
        beat.shards.some((shard) => shard.usedBytesPerGpu.length > 0),
      ),
    );
    assert.deepEqual(
      heartbeat.shards.find((shard) => shard.shardId === 's-main')?.usedBytesPerGpu,
      [{ gpuUuid: gpu0, usedBytes: 123 * MiB }],
    );
  });

  it('resizes live by writing the region limit, refusing a cap below usage', async () => {
    const regionFile = join(regionDir('s-main'), 'region');
    const resized = await controlPlane.command(HOST, {
      type: 'resize',
      shardId: 's-main',
      gpus: [{ uuid: gpu0, limitBytes: 3 * GiB }],
    });
    assert.ok(resized.ok, JSON.stringify(resized));
    assert.deepEqual(resized.result, {
      type: 'resize',
      gpus: [{ uuid: gpu0, limitBytes: 3 * GiB }],
    });
    assert.equal((await readRegion(regionFile)).devices[0]?.limitBytes, 3 * GiB);

    const below = await controlPlane.command(HOST, {
      type: 'resize',
      shardId: 's-main',
      gpus: [{ uuid: gpu0, limitBytes: 100 * MiB }],
    });
    assert.equal(!below.ok && below.error.code, 'BELOW_USAGE');
    assert.equal((await readRegion(regionFile)).devices[0]?.limitBytes, 3 * GiB);

    const unknown = await controlPlane.command(HOST, {
      type: 'resize',
      shardId: 'no-such-shard',
      gpus: [{ uuid: gpu0, limitBytes: GiB }],
    });
    assert.equal(!unknown.ok && unknown.error.code, 'UNKNOWN_SHARD');
    const foreign = await controlPlane.command(HOST, {
      type: 'resize',
      shardId: 's-retry',
      gpus: [{ uuid: gpu1, limitBytes: GiB }],
    });
    assert.equal(!foreign.ok && foreign.error.code, 'UNKNOWN_GPU');
  });

  it('a shard running the interposer: its usage in heartbeats, a live resize enforced', async () => {
    const held = 256 * MiB;
    const launched = await controlPlane.command(HOST, {
      type: 'launch',
      shard: spec('s-cuda', { image: CUDA_IMAGE, command: ['/cuda-probe', 'hold', String(held)] }),
    });
    assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
    const containerId = launched.result.containerId!;
    await waitFor('the probe to hold its memory', () =>
      docker('logs', containerId).includes('{"result":0}') ? true : undefined,
    );
    const context = agent!.inventory.contextOverheadBytes;
    const heartbeat = await waitFor("a heartbeat with the interposer's count", () =>
      controlPlane.heartbeats.find((beat) =>
        beat.shards.some((shard) => shard.shardId === 's-cuda' && shard.usedBytesPerGpu.length > 0),
      ),
    );
    assert.deepEqual(
      heartbeat.shards.find((shard) => shard.shardId === 's-cuda')?.usedBytesPerGpu,
      [{ gpuUuid: gpu0, usedBytes: context + held }],
    );
    // The fake NVML shares the fake GPUs' memory with the shards: the host sees it too.
    assert.ok((heartbeat.gpus.find((gpu) => gpu.uuid === gpu0)?.usedBytes ?? 0) >= context + held);

    const probe = () =>
      JSON.parse(docker('exec', containerId, '/cuda-probe', 'alloc', String(held))).result;
    assert.equal(limitOf('s-cuda'), 2 * GiB, 'the cap in the limits file');
    assert.equal(probe(), 0, 'a second process fits under the 2 GiB cap');
    const resized = await controlPlane.command(HOST, {
      type: 'resize',
      shardId: 's-cuda',
      gpus: [{ uuid: gpu0, limitBytes: GiB }],
    });
    assert.ok(resized.ok, JSON.stringify(resized));
    assert.equal(limitOf('s-cuda'), GiB);
    assert.equal(
      probe(),
      2,
      'after the resize the same process no longer fits: CUDA_ERROR_OUT_OF_MEMORY',
    );
  });

  it('stops with the grace period, then kills; a shard that honours SIGTERM stops at once', async () => {
    await controlPlane.command(HOST, {
      type: 'launch',
      shard: spec('s-stubborn', { command: ['/workload', 'ignore-term'] }),
    });
    const started = Date.now();
    const stopped = await controlPlane.command(HOST, {
      type: 'stop',
      shardId: 's-stubborn',
      graceSeconds: 1,
    });
    const took = Date.now() - started;
    assert.deepEqual(stopped.ok && stopped.result, { type: 'stop', wasRunning: true });
    assert.ok(took >= 1000, `stopped after ${took} ms, before the grace period`);
    const event = await controlPlane.waitForState('s-stubborn', 'STOPPED');
    assert.equal(event.exitCode, 137, 'killed');
    assert.deepEqual(
      shardContainers(HOST)
        .filter((c) => c.shardId === 's-stubborn')
        .map((c) => c.state),
      ['exited'],
      'a stopped shard keeps its container',
    );

    const quick = Date.now();
    const polite = await controlPlane.command(HOST, {
      type: 'stop',
      shardId: 's-retry',
      graceSeconds: 30,
    });
    assert.ok(polite.ok);
    assert.ok(Date.now() - quick < 10_000, 'SIGTERM was not sent first');
    assert.equal((await controlPlane.waitForState('s-retry', 'STOPPED')).exitCode, 0);
    const again = await controlPlane.command(HOST, {
      type: 'stop',
      shardId: 's-retry',
      graceSeconds: 30,
    });
    assert.deepEqual(again.ok && again.result, { type: 'stop', wasRunning: false });
  });

  it('reports the exit code of a shard that ends on its own', async () => {
    await controlPlane.command(HOST, {
      type: 'launch',
      shard: spec('s-exit', { command: ['/workload', 'exit', '7', '300'] }),
    });
    const exited = await controlPlane.waitForState('s-exit', 'EXITED');
    assert.equal(exited.exitCode, 7);
  });

  it('reports a container removed behind its back as VANISHED', async () => {
    const reply = await controlPlane.command(HOST, { type: 'launch', shard: spec('s-vanish') });
    assert.ok(reply.ok && reply.result.type === 'launch');
    docker('rm', '-f', reply.result.containerId!);
    const vanished = await controlPlane.waitForState('s-vanish', 'VANISHED');
    assert.equal(vanished.containerId, reply.result.containerId);
  });

  it('deletes a shard: container and region folder gone; deleting again succeeds', async () => {
    assert.equal(existsSync(regionDir('s-main')), true);
    const deleted = await controlPlane.command(HOST, { type: 'delete', shardId: 's-main' });
    assert.deepEqual(deleted.ok && deleted.result, { type: 'delete', removed: true });
    assert.deepEqual(
      shardContainers(HOST).filter((c) => c.shardId === 's-main'),
      [],
    );
    assert.equal(existsSync(regionDir('s-main')), false);
    const again = await controlPlane.command(HOST, { type: 'delete', shardId: 's-main' });
    assert.deepEqual(again.ok && again.result, { type: 'delete', removed: false });
  });

  it('refuses commands it cannot carry out, with the protocol error codes', async () => {
    const unknownGpu = await controlPlane.command(HOST, {
      type: 'launch',
      shard: spec('s-bad', {
        gpus: [{ uuid: 'GPU-00000000-0000-0000-0000-000000000000', limitBytes: GiB }],
      }),
    });
    assert.equal(!unknownGpu.ok && unknownGpu.error.code, 'UNKNOWN_GPU');
    const garbage = await controlPlane.sendRaw(HOST, 'not json');
    assert.deepEqual(
      [garbage.ok, garbage.commandId, !garbage.ok && garbage.error.code],
      [false, null, 'INVALID_COMMAND'],
    );
    const commandId = randomUUID();
    const newer = await controlPlane.sendRaw(
      HOST,
      JSON.stringify({ protocolVersion: 99, hostId: HOST, commandId }),
    );
    assert.deepEqual(
      [newer.commandId, !newer.ok && newer.error.code],
      [commandId, 'UNSUPPORTED_VERSION'],
    );
    const misaddressed = await controlPlane.sendRaw(
      HOST,
      JSON.stringify({
        protocolVersion: 1,
        hostId: 'other-host',
        commandId,
        type: 'delete',
        shardId: 's-x',
      }),
    );
    assert.equal(!misaddressed.ok && misaddressed.error.code, 'WRONG_HOST');
  });

  it('adopts running shards after a restart, without duplicates or orphans', async () => {
    const launched = await controlPlane.command(HOST, { type: 'launch', shard: spec('s-adopt') });
    assert.ok(launched.ok && launched.result.type === 'launch');
    const containerId = launched.result.containerId;
    await agent!.stop();
    assert.equal(inspect(containerId!).State.Running, true, 'stopping the agent stops no shard');
    const registers = controlPlane.registers.length;
    agent = await startAgent();
    const register = controlPlane.registers[registers]!;
    assert.deepEqual(
      register.runningShards.find((shard) => shard.shardId === 's-adopt'),
      // With where its memory is: a shard lost while suspended comes back suspended.
      { shardId: 's-adopt', containerId, state: 'RUNNING', memory: 'resident' },
    );
    await agent.reconcileNow();
    const relaunch = await controlPlane.command(HOST, { type: 'launch', shard: spec('s-adopt') });
    assert.deepEqual(relaunch.ok && relaunch.result, {
      type: 'launch',
      state: 'RUNNING',
      containerId,
    });
    assert.deepEqual(
      shardContainers(HOST)
        .filter((c) => c.shardId === 's-adopt')
        .map((c) => c.id),
      [containerId],
    );
  });

  it("stops a start the control plane refuses, with the control plane's reason", async () => {
    controlPlane.rejectRegistration = {
      code: 'HOST_ID_IN_USE',
      message: 'another agent is registered as this host',
    };
    try {
      await assert.rejects(
        startAgent(),
        (error: unknown) =>
          error instanceof RegistrationRejectedError &&
          error.code === 'HOST_ID_IN_USE' &&
          /refused to register this host \(HOST_ID_IN_USE\): another agent/.test(error.message),
      );
    } finally {
      controlPlane.rejectRegistration = undefined;
    }
  });

  it('registers again after the NATS connection comes back', async () => {
    const registers = controlPlane.registers.length;
    await nats.restart();
    const again = await waitFor(
      'a register after the reconnection',
      () => controlPlane.registers[registers],
      15_000,
    );
    assert.ok(again.runningShards.some((shard) => shard.shardId === 's-adopt'));
  });

  it('registers again when a reconcile goes unanswered (the control plane lost this host)', async () => {
    const registers = controlPlane.registers.length;
    controlPlane.ignoreReconciles = true;
    try {
      await agent!.reconcileNow();
    } finally {
      controlPlane.ignoreReconciles = false;
    }
    const again = controlPlane.registers[registers];
    assert.ok(again, 'no register after the unanswered reconcile');
    assert.equal(again.hostId, HOST);
  });

  it('reconciles: stops what must stay stopped, removes what is unknown, launches what is missing', async () => {
    await controlPlane.command(HOST, { type: 'launch', shard: spec('s-stray') });
    await controlPlane.command(HOST, { type: 'launch', shard: spec('s-pause') });
    const desired = controlPlane.stateOf(HOST);
    // The control plane's database, changed without commands (as after lost messages):
    desired.desired = desired.desired.filter(
      (s) => s.shardId !== 's-stray' && s.shardId !== 's-pause',
    );
    desired.stoppedShardIds.push('s-pause');
    desired.desired.push(spec('s-missing'));
    const since = controlPlane.states.length;
    await agent!.reconcileNow();
    const request = controlPlane.reconciles.at(-1)!;
    assert.ok(request.containers.some((c) => c.shardId === 's-stray' && c.running));
    assert.deepEqual(
      shardContainers(HOST).filter((c) => c.shardId === 's-stray'),
      [],
    );
    assert.equal(existsSync(regionDir('s-stray')), false);
    await controlPlane.waitForState('s-pause', 'STOPPED', 10_000, since);
    await controlPlane.waitForState('s-missing', 'RUNNING', 10_000, since);
    // Shards the control plane still wants are left as they are.
    assert.equal(shardContainers(HOST).find((c) => c.shardId === 's-adopt')?.state, 'running');
  });

  it('launches afresh a shard whose container was created but never started (the agent was killed between create and start)', async () => {
    const launched = await controlPlane.command(HOST, { type: 'launch', shard: spec('s-created') });
    assert.ok(launched.ok && launched.result.type === 'launch');
    await agent!.stop();
    // What a kill between `docker create` and `docker start` leaves: the shard's container,
    // with its name and labels, created and never started.
    const made = inspect(launched.result.containerId!);
    docker('rm', '-f', made.Id);
    const labels = Object.entries(made.Config.Labels as Record<string, string>).flatMap(
      ([key, value]) => ['--label', `${key}=${value}`],
    );
    const created = docker('create', '--name', made.Name.slice(1), ...labels, IMAGE);
    assert.equal(inspect(created).State.Status, 'created');
    const since = controlPlane.states.length;
    agent = await startAgent();
    const running = await controlPlane.waitForState('s-created', 'RUNNING', 15_000, since);
    const containers = shardContainers(HOST).filter((c) => c.shardId === 's-created');
    assert.deepEqual(
      containers.map((c) => [c.id, c.state]),
      [[running.containerId, 'running']],
      'one container for the shard, running, and not the one that never started',
    );
    assert.notEqual(running.containerId, created);
  });

  it('pulls an absent image from a registry, with progress, and reports a pull that fails', async () => {
    registry = await startRegistry();
    const remote = `${registry.address}/gpushards-test/pulled:${process.pid}`;
    importWorkloadImage(remote, { '/payload.bin': randomBytes(16 * MiB) });
    images.push(remote);
    docker('push', remote);
    docker('rmi', remote);
    const reply = await controlPlane.command(HOST, {
      type: 'launch',
      shard: spec('s-pull', { image: remote }),
    });
    assert.deepEqual(reply.ok && reply.result, { type: 'launch', state: 'PULLING' });
    await controlPlane.waitForState('s-pull', 'RUNNING', 60_000);
    const pulling = controlPlane.statesOf('s-pull').filter((event) => event.state === 'PULLING');
    const last = pulling.at(-1)?.progress;
    assert.ok(
      last && last.completedBytes >= 16 * MiB,
      JSON.stringify(pulling.map((event) => event.progress)),
    );
    assert.ok(last.totalBytes !== undefined && last.totalBytes >= last.completedBytes);

    const missing = await controlPlane.command(HOST, {
      type: 'launch',
      shard: spec('s-nopull', { image: `${registry.address}/gpushards-test/absent:1` }),
    });
    assert.deepEqual(missing.ok && missing.result, { type: 'launch', state: 'PULLING' });
    const failed = await controlPlane.waitForState('s-nopull', 'FAILED', 30_000);
    assert.match(failed.reason ?? '', /^image pull failed: .*absent/);
  });
});

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { ProcessCheckpointState } from '@gpushards/limits';
import type { ShardLaunchSpec } from '@gpushards/protocol';

import { fakeDriverEnv } from '../gpus/fake-driver.js';
import { parseSimulatedGpus } from '../gpus/simulated-gpus.js';
import { startAgentProcess, type AgentProcess } from '../testing/agent-process.js';
import { ScriptedControlPlane } from '../testing/control-plane-peer.js';
import { cleanUpDocker, docker, importCudaProbeImage } from '../testing/docker.js';
import { fakeGpuUuid, fakeLibraries, nativeArtifacts } from '../testing/native.js';
import { startNatsServer, type TestNatsServer } from '../testing/nats-server.js';
import { waitFor } from '../testing/processes.js';
import { openCheckpointApi, type CheckpointApi } from './checkpoint-driver.js';
import { containerPids, cudaProcesses } from './container-memory.js';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const HOST = `memory-crash-${process.pid}`;
const IMAGE = `gpushards-test/memory-crash-probe:${process.pid}`;
const GPUS = '1xTest GPU:8g';
const KEPT = 128 * MiB;
const SHARD = 'c-notebook';
/** Conditions, not sleeps: generous for a loaded CI machine. */
const WAIT_MS = 30_000;

/**
 * The crash points of elastic memory (docs/elastic.md, issue #30) in the agent: an agent in a
 * process of its own is killed -9 in the middle of a move of a two-process container, held
 * there by the fake driver's move gate (GPUSHARDS_FAKE_MOVE_GATE: its checkpoints and restores
 * wait for passes the test gives). The agent started next finds the memory partly moved,
 * reports it `partial`, and finishes the move in the direction the control plane's desired
 * state wants (libs/limits memoryActionFor), the container running throughout with its data.
 */
describe('elastic memory: an agent killed in the middle of a move (Docker)', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'gpushards-memory-crash-'));
  const gate = join(stateDir, 'move-gate');
  let nats: TestNatsServer | undefined;
  let controlPlane: ScriptedControlPlane | undefined;
  let agent: AgentProcess | undefined;
  let driver: CheckpointApi;
  let containerId = '';
  let spec: ShardLaunchSpec;
  /** What the two processes hold on the card, as NVML listed them: each holds half. */
  let resident = 0;

  before(async () => {
    const fakes = fakeLibraries();
    importCudaProbeImage(IMAGE, fakes.cuda, nativeArtifacts().interposer);
    nats = await startNatsServer([HOST]);
    controlPlane = await ScriptedControlPlane.connect(nats.url, nats.controlPlane);
    // The test reads the processes' states through the same fake driver as the agent.
    Object.assign(
      process.env,
      fakeDriverEnv(parseSimulatedGpus(GPUS), join(stateDir, 'fake-gpu-state'), HOST),
    );
    driver = openCheckpointApi(fakes.cuda);
  });

  after(async () => {
    await agent?.kill();
    await controlPlane?.close();
    await nats?.stop();
    cleanUpDocker([HOST], [IMAGE]);
    rmSync(stateDir, { recursive: true, force: true });
  });

  /** A new agent process on the host; the move gate's file stays as the test left it. */
  async function startAgent(env: Record<string, string> = {}): Promise<AgentProcess> {
    const reconcilesAt = controlPlane!.reconciles.length;
    agent = await startAgentProcess({
      hostId: HOST,
      natsUrl: nats!.url,
      auth: nats!.agent(HOST),
      stateDir,
      gpus: GPUS,
      fakeLibraryDir: fakeLibraries().dir,
      interposerPath: nativeArtifacts().interposer,
      env: { GPUSHARDS_FAKE_MOVE_GATE: gate, GPUSHARDS_SUSPEND_BUDGET: '4g', ...env },
    });
    await waitFor('its reconcile at start', () => controlPlane!.reconciles[reconcilesAt]);
    return agent;
  }

  const passes = (count: number) => writeFileSync(gate, `${count}\n`);
  const openGate = () => rmSync(gate, { force: true });

  /** The container's CUDA processes' states, by the driver, in pid order. */
  async function states(): Promise<ProcessCheckpointState[]> {
    const pids = containerPids('/proc', new Set([containerId])).get(containerId) ?? [];
    const found = await cudaProcesses(driver, pids);
    return found.sort((a, b) => a.pid - b.pid).map((p) => p.state);
  }

  async function statesAre(want: ProcessCheckpointState[]): Promise<void> {
    await waitFor(`the processes ${want.join(', ')}`, async () =>
      JSON.stringify((await states()).sort()) === JSON.stringify([...want].sort())
        ? true
        : undefined,
    );
  }

  /** Where the latest reconcile request (from `at` on) says the notebook's memory is. */
  const reconciledMemory = (at: number) =>
    controlPlane!.reconciles
      .slice(at)
      .map((r) => r.containers.find((c) => c.shardId === SHARD))
      .at(-1)?.memory;

  async function pokeIntact(poke: number): Promise<void> {
    docker('kill', '--signal', 'USR1', containerId);
    await answered(poke);
  }

  async function answered(poke: number): Promise<void> {
    const lines = await waitFor(`both processes to answer poke ${poke}`, () => {
      const found = docker('logs', containerId)
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, number>)
        .filter((line) => line.poke === poke);
      return found.length === 2 ? found : undefined;
    });
    for (const line of lines) assert.deepEqual([line.intact, line.result], [1, 0]);
  }

  /** Sends a move and kills the agent once one process has moved and the other waits at the gate. */
  async function killMidway(type: 'suspend' | 'resume'): Promise<void> {
    const at = controlPlane!.states.length;
    passes(1);
    const reply = await controlPlane!.command(
      HOST,
      type === 'suspend'
        ? { type, shardId: SHARD, cause: 'suspend-requested' }
        : { type, shardId: SHARD },
    );
    assert.ok(reply.ok, JSON.stringify(reply));
    const moving = type === 'suspend' ? 'SUSPENDING' : 'RESUMING';
    await waitFor('one process moved', () =>
      controlPlane!.states
        .slice(at)
        .find((e) => e.state === moving && (e.progress?.completedBytes ?? 0) > 0),
    );
    await agent!.kill();
    // Killed between the processes: one moved (checkpointed; restored, so locked), one not
    // (locked; checkpointed).
    assert.deepEqual((await states()).sort(), ['checkpointed', 'locked']);
  }

  it('killed mid-suspend (one process checkpointed, one locked): the next agent reports partial and, the state wanting it suspended, finishes the suspend', async () => {
    await startAgent();
    const gpu0 = fakeGpuUuid(HOST, 0);
    spec = {
      shardId: SHARD,
      teamId: 'team-crash',
      name: SHARD,
      image: IMAGE,
      env: {},
      gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
      capPolicy: 'kill',
      command: ['/cuda-probe', 'keep', String(KEPT), '2'],
    };
    const launched = await controlPlane!.command(HOST, { type: 'launch', shard: spec });
    assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
    containerId = launched.result.containerId!;
    await statesAre(['running', 'running']);
    await pokeIntact(1);
    resident = await waitFor('both processes on the card', () => {
      const shard = controlPlane!.heartbeats.at(-1)?.shards.find((s) => s.shardId === SHARD);
      const bytes = (shard?.realBytesPerGpu ?? []).reduce((sum, gpu) => sum + gpu.realBytes, 0);
      return bytes >= 2 * KEPT ? bytes : undefined;
    });

    await killMidway('suspend');
    // Still held at the gate: the new agent's own move waits there too.
    passes(0);
    const at = controlPlane!.reconciles.length;
    const statesAt = controlPlane!.states.length;
    await startAgent();
    assert.equal(reconciledMemory(at), 'partial');
    openGate();
    const suspended = await controlPlane!.waitForState(SHARD, 'SUSPENDED', WAIT_MS, statesAt);
    // Only the process the killed agent had not moved was left to move; what the other holds
    // in host RAM the killed agent had kept in the state folder.
    assert.deepEqual(
      { bytes: suspended.moved?.bytes, processes: suspended.moved?.processes },
      { bytes: resident / 2, processes: 1 },
    );
    await statesAre(['checkpointed', 'checkpointed']);
    const beatsAt = controlPlane!.heartbeats.length;
    const beat = await waitFor('a heartbeat saying suspended', () =>
      controlPlane!.heartbeats
        .slice(beatsAt)
        .flatMap((b) => b.shards)
        .find((s) => s.shardId === SHARD && s.memory === 'suspended'),
    );
    assert.equal(beat.suspendedBytes, resident);
    const after = controlPlane!.reconciles.length;
    await controlPlane!.command(HOST, { type: 'reconcile' });
    await waitFor('a reconcile', () => controlPlane!.reconciles[after]);
    assert.equal(reconciledMemory(after), 'suspended');

    // The agent that found it suspended hears its wake.
    const wakesAt = controlPlane!.wakes.length;
    docker('kill', '--signal', 'USR1', containerId);
    await waitFor('the wake', () =>
      controlPlane!.wakes.slice(wakesAt).find((w) => w.shardId === SHARD),
    );
    const resumeAt = controlPlane!.states.length;
    assert.ok((await controlPlane!.command(HOST, { type: 'resume', shardId: SHARD })).ok);
    const resumed = await controlPlane!.waitForState(SHARD, 'RESUMED', WAIT_MS, resumeAt);
    assert.deepEqual(
      { bytes: resumed.moved?.bytes, processes: resumed.moved?.processes },
      { bytes: resident, processes: 2 },
    );
    await statesAre(['running', 'running']);
    await answered(2);
  });

  it('killed mid-suspend, the state wanting it resident (the suspend was called off): the next agent brings every process back', async () => {
    await killMidway('suspend');
    passes(0);
    // The control plane's desired state: resident (its suspend failed, or never committed).
    const desired = controlPlane!.stateOf(HOST);
    desired.suspendedShardIds = [];
    desired.desired = [spec];
    const at = controlPlane!.reconciles.length;
    const statesAt = controlPlane!.states.length;
    await startAgent();
    assert.equal(reconciledMemory(at), 'partial');
    openGate();
    const resumed = await controlPlane!.waitForState(SHARD, 'RESUMED', WAIT_MS, statesAt);
    assert.deepEqual(
      { bytes: resumed.moved?.bytes, processes: resumed.moved?.processes },
      { bytes: resident / 2, processes: 1 },
    );
    await statesAre(['running', 'running']);
    await pokeIntact(3);
  });

  it('killed mid-resume (one process restored, one still checkpointed): the next agent finishes the resume', async () => {
    const at = controlPlane!.states.length;
    assert.ok(
      (
        await controlPlane!.command(HOST, {
          type: 'suspend',
          shardId: SHARD,
          cause: 'suspend-requested',
        })
      ).ok,
    );
    await controlPlane!.waitForState(SHARD, 'SUSPENDED', WAIT_MS, at);
    await killMidway('resume');
    passes(0);
    const reconcilesAt = controlPlane!.reconciles.length;
    const statesAt = controlPlane!.states.length;
    await startAgent();
    assert.equal(reconciledMemory(reconcilesAt), 'partial');
    openGate();
    const resumed = await controlPlane!.waitForState(SHARD, 'RESUMED', WAIT_MS, statesAt);
    assert.deepEqual(
      { bytes: resumed.moved?.bytes, processes: resumed.moved?.processes },
      { bytes: resident / 2, processes: 1 },
    );
    await statesAre(['running', 'running']);
    await pokeIntact(4);
  });

  it('a host whose budget is 0 registers that it does not suspend, and a suspend is NOT_SUSPENDABLE with the reason', async () => {
    await agent!.stop();
    const registersAt = controlPlane!.registers.length;
    await startAgent({ GPUSHARDS_SUSPEND_BUDGET: '0' });
    const host = controlPlane!.registers[registersAt]!.host;
    const reason = 'suspends are turned off on this host (GPUSHARDS_SUSPEND_BUDGET=0)';
    assert.equal(host.suspendBudgetBytes, 0);
    assert.equal(host.suspendUnavailableReason, reason);
    const refused = await controlPlane!.command(HOST, {
      type: 'suspend',
      shardId: SHARD,
      cause: 'make-room',
    });
    assert.deepEqual(!refused.ok && refused.error, { code: 'NOT_SUSPENDABLE', message: reason });
    await statesAre(['running', 'running']);
  });
});

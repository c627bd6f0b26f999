import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Heartbeat, ShardLaunchSpec, ShardStateEvent } from '@gpushards/protocol';

import type { Agent } from '../create-agent.js';
import type { ScriptedControlPlane } from '../testing/control-plane-peer.js';
import { startDockerAgent, type DockerAgentStack } from '../testing/docker-agent.js';
import { docker } from '../testing/docker.js';
import { waitFor } from '../testing/processes.js';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const HOST = `memory-test-${process.pid}`;
const IMAGE = `gpushards-test/memory-probe:${process.pid}`;
/** What each CUDA process of the notebook keeps on the GPU, a pattern of its own. */
const KEPT = 256 * MiB;
const BUDGET = 3 * GiB;
/** Conditions, not sleeps: generous for a loaded CI machine. */
const WAIT_MS = 30_000;

type ProbeLine = Record<string, number>;
type HeartbeatShard = Heartbeat['shards'][number];

/**
 * Elastic memory (docs/elastic.md, issue #30) through the agent's own handlers and the real
 * Docker engine: the control plane's suspend and resume commands over NATS, the fake driver's
 * checkpoint API moving two CUDA processes of one container out of the fake card and back,
 * libvgpu.so's wake gate holding a suspended process's CUDA call and ringing the agent, which
 * publishes a wake. The probe (`cuda-probe keep`) writes its own pattern in each process and
 * reads all of it back at each SIGUSR1.
 */
describe('elastic memory: suspend and resume in the real Docker engine', () => {
  let stack: DockerAgentStack | undefined;
  let controlPlane: ScriptedControlPlane;
  let agent: Agent;
  let gpu0 = '';
  /** The notebook's two processes' GPU memory as NVML listed it, and the card's use, resident. */
  let resident = 0;
  let cardUsed = 0;
  let notebook = '';

  before(async () => {
    stack = await startDockerAgent({
      hostId: HOST,
      image: IMAGE,
      stateDir: mkdtempSync(join(tmpdir(), 'gpushards-memory-')),
      gpus: '1xTest GPU:8g',
      options: { suspendBudget: { bytes: BUDGET } },
    });
    ({ controlPlane, agent } = stack);
    [gpu0 = ''] = agent.inventory.gpus.map((gpu) => gpu.uuid);
  });

  after(async () => {
    await stack?.stop();
  });

  const spec = (shardId: string, limitBytes: number, command: string[]): ShardLaunchSpec => ({
    shardId,
    teamId: 'team-memory',
    name: shardId,
    image: IMAGE,
    env: {},
    gpus: [{ uuid: gpu0, limitBytes }],
    capPolicy: 'kill',
    command,
  });

  async function launch(shard: ShardLaunchSpec): Promise<string> {
    const launched = await controlPlane.command(HOST, { type: 'launch', shard });
    assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
    return launched.result.containerId!;
  }

  /** The probe's JSON lines so far. */
  function probeLines(containerId: string): ProbeLine[] {
    return docker('logs', containerId)
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as ProbeLine);
  }

  /** Waits for one line per process that has `key` = `value`, and returns them by process. */
  function eachProcess(containerId: string, key: string, value: number, processes = 2) {
    return waitFor(`${processes} processes to print ${key} ${value}`, () => {
      const lines = probeLines(containerId).filter((line) => line[key] === value);
      return lines.length === processes
        ? lines.sort((a, b) => (a.process ?? 0) - (b.process ?? 0))
        : undefined;
    });
  }

  /** A heartbeat sent after `since` whose entry for the shard passes `match`. */
  function heartbeatWith(
    shardId: string,
    since: number,
    what: string,
    match: (shard: HeartbeatShard, beat: Heartbeat) => boolean,
  ): Promise<{ shard: HeartbeatShard; beat: Heartbeat }> {
    return waitFor(
      `a heartbeat: ${what}`,
      () => {
        for (const beat of controlPlane.heartbeats.slice(since)) {
          const shard = beat.shards.find((s) => s.shardId === shardId);
          if (shard !== undefined && match(shard, beat)) return { shard, beat };
        }
        return undefined;
      },
      WAIT_MS,
    );
  }

  const realBytes = (shard: HeartbeatShard) =>
    (shard.realBytesPerGpu ?? []).reduce((sum, gpu) => sum + gpu.realBytes, 0);
  const usedOnCard = (beat: Heartbeat) => beat.gpus.find((g) => g.uuid === gpu0)!.usedBytes;

  /** The shard's container in the agent's next reconcile request. */
  async function reconciled(shardId: string) {
    const before = controlPlane.reconciles.length;
    await agent.reconcileNow();
    const request = await waitFor('the reconcile request', () => controlPlane.reconciles[before]);
    return request.containers.find((c) => c.shardId === shardId);
  }

  /** Where the agent's next reconcile request says the shard's memory is. */
  const reconciledMemory = async (shardId: string) => (await reconciled(shardId))?.memory;

  /** The events of one move, from `after` on, up to its end. */
  async function move(shardId: string, after: number, end: 'SUSPENDED' | 'RESUMED') {
    const ended = await controlPlane.waitForState(shardId, end, WAIT_MS, after);
    const events = controlPlane.states.slice(after).filter((e) => e.shardId === shardId);
    const moving = end === 'SUSPENDED' ? 'SUSPENDING' : 'RESUMING';
    const progress = events
      .slice(0, events.indexOf(ended))
      .filter((e): e is ShardStateEvent & { progress: object } => e.state === moving)
      .map((e) => e.progress!);
    return { ended, progress, events };
  }

  it('suspend moves both processes to host RAM and gives the card its memory back; resume brings them back with their data intact', async () => {
    notebook = await launch(
      spec('m-notebook', 2 * GiB, ['/cuda-probe', 'keep', String(KEPT), '2']),
    );
    for (const kept of await eachProcess(notebook, 'kept', KEPT)) assert.equal(kept.result, 0);
    const seen = await heartbeatWith(
      'm-notebook',
      0,
      'both processes on the card',
      (s) => realBytes(s) >= 2 * KEPT,
    );
    resident = realBytes(seen.shard);
    cardUsed = usedOnCard(seen.beat);
    assert.equal(await reconciledMemory('m-notebook'), 'resident');

    const before = controlPlane.states.length;
    const suspended = await controlPlane.command(HOST, {
      type: 'suspend',
      shardId: 'm-notebook',
      cause: 'suspend-requested',
    });
    assert.deepEqual(suspended, {
      ...suspended,
      ok: true,
      result: { type: 'suspend', memory: 'resident' },
    });
    const out = await move('m-notebook', before, 'SUSPENDED');
    // Progress after each process: none moved, one, both (of what NVML listed before).
    assert.deepEqual(
      out.progress.map((p) => p.completedBytes),
      [0, resident / 2, resident],
      JSON.stringify(out.progress),
    );
    for (const p of out.progress) assert.equal(p.totalBytes, resident);
    assert.equal(out.ended.moved?.bytes, resident);
    assert.equal(out.ended.moved?.processes, 2);
    assert.ok(out.ended.moved!.seconds >= 0);

    // The fake card's NVML gives the memory back; the heartbeat says where it went.
    const beatsAt = controlPlane.heartbeats.length;
    const away = await heartbeatWith(
      'm-notebook',
      beatsAt,
      'suspended',
      (s) => s.memory === 'suspended',
    );
    assert.equal(away.shard.suspendedBytes, resident);
    assert.equal(realBytes(away.shard), 0, 'NVML lists none of its processes');
    assert.equal(usedOnCard(away.beat), cardUsed - resident);
    assert.equal(await reconciledMemory('m-notebook'), 'suspended');
    assert.equal(docker('inspect', '-f', '{{.State.Running}}', notebook), 'true');

    const resumeAt = controlPlane.states.length;
    const resumed = await controlPlane.command(HOST, { type: 'resume', shardId: 'm-notebook' });
    assert.deepEqual(resumed, {
      ...resumed,
      ok: true,
      result: { type: 'resume', memory: 'suspended' },
    });
    const back = await move('m-notebook', resumeAt, 'RESUMED');
    assert.deepEqual(
      back.progress.map((p) => p.completedBytes),
      [0, resident / 2, resident],
    );
    assert.deepEqual(
      { bytes: back.ended.moved?.bytes, processes: back.ended.moved?.processes },
      { bytes: resident, processes: 2 },
    );
    const home = await heartbeatWith(
      'm-notebook',
      controlPlane.heartbeats.length,
      'resident again',
      (s) => s.memory === 'resident',
    );
    assert.equal(home.shard.suspendedBytes, undefined);
    assert.equal(realBytes(home.shard), resident);
    assert.equal(usedOnCard(home.beat), cardUsed);
    assert.equal(await reconciledMemory('m-notebook'), 'resident');

    docker('kill', '--signal', 'USR1', notebook);
    for (const poke of await eachProcess(notebook, 'poke', 1)) {
      assert.deepEqual({ intact: poke.intact, result: poke.result }, { intact: 1, result: 0 });
    }
  });

  it('on demand: a CUDA call of the suspended shard waits, its wake reaches the control plane, and the resume lets it go on', async () => {
    const before = controlPlane.states.length;
    const suspended = await controlPlane.command(HOST, {
      type: 'suspend',
      shardId: 'm-notebook',
      cause: 'idle-suspend',
    });
    assert.ok(suspended.ok, JSON.stringify(suspended));
    await move('m-notebook', before, 'SUSPENDED');

    const wakesAt = controlPlane.wakes.length;
    docker('kill', '--signal', 'USR1', notebook);
    const wake = await waitFor(
      'the wake',
      () => controlPlane.wakes.slice(wakesAt).find((w) => w.shardId === 'm-notebook'),
      WAIT_MS,
    );
    assert.equal(wake.hostId, HOST);
    assert.ok(wake.requests >= 1, `requests ${wake.requests}`);
    // The reads wait in libvgpu.so: no answer while the memory is away.
    assert.deepEqual(
      probeLines(notebook).filter((line) => line.poke === 2),
      [],
    );

    const resumeAt = controlPlane.states.length;
    const resumed = await controlPlane.command(HOST, { type: 'resume', shardId: 'm-notebook' });
    assert.ok(resumed.ok, JSON.stringify(resumed));
    await move('m-notebook', resumeAt, 'RESUMED');
    for (const poke of await eachProcess(notebook, 'poke', 2)) {
      assert.deepEqual({ intact: poke.intact, result: poke.result }, { intact: 1, result: 0 });
    }
    assert.match(await agent.metrics(), /^gpushards_agent_wake_latency_seconds_count 1$/m);
    assert.match(await agent.metrics(), /^gpushards_agent_wake_messages_total [1-9]/m);
  });

  it('a suspend older than a resume it took on (a retry from before the agent came back) is STALE_COMMAND and moves nothing', async () => {
    const before = controlPlane.states.length;
    const suspended = await controlPlane.command(HOST, {
      type: 'suspend',
      shardId: 'm-notebook',
      cause: 'make-room',
      shardVersion: 5,
    });
    assert.ok(suspended.ok, JSON.stringify(suspended));
    await move('m-notebook', before, 'SUSPENDED');
    const resumeAt = controlPlane.states.length;
    const resumed = await controlPlane.command(HOST, {
      type: 'resume',
      shardId: 'm-notebook',
      shardVersion: 7,
    });
    assert.ok(resumed.ok, JSON.stringify(resumed));
    await move('m-notebook', resumeAt, 'RESUMED');

    const lateAt = controlPlane.states.length;
    const late = await controlPlane.command(HOST, {
      type: 'suspend',
      shardId: 'm-notebook',
      cause: 'make-room',
      shardVersion: 5,
    });
    assert.equal(late.ok, false);
    assert.equal(!late.ok && late.error.code, 'STALE_COMMAND');
    assert.match(
      !late.ok ? late.error.message : '',
      /decided at its version 5, before .* version 7/,
    );
    assert.equal(await reconciledMemory('m-notebook'), 'resident');
    assert.deepEqual(
      controlPlane.statesOf('m-notebook').filter((e) => controlPlane.states.indexOf(e) >= lateAt),
      [],
    );
  });

  it('a container that exits while suspended is EXITED: its memory went with its processes, and the card has none of it', async () => {
    const before = controlPlane.states.length;
    const suspended = await controlPlane.command(HOST, {
      type: 'suspend',
      shardId: 'm-notebook',
      cause: 'suspend-requested',
    });
    assert.ok(suspended.ok, JSON.stringify(suspended));
    await move('m-notebook', before, 'SUSPENDED');

    const exitAt = controlPlane.states.length;
    docker('kill', '--signal', 'TERM', notebook);
    const exited = await controlPlane.waitForState('m-notebook', 'EXITED', WAIT_MS, exitAt);
    assert.equal(exited.exitCode, 0);
    // The next heartbeat has no entry for it, and the card none of its memory.
    const beatsAt = controlPlane.heartbeats.length;
    const beat = await waitFor(
      'a heartbeat after the exit',
      () => controlPlane.heartbeats[beatsAt],
      WAIT_MS,
    );
    assert.equal(
      beat.shards.find((s) => s.shardId === 'm-notebook'),
      undefined,
    );
    assert.equal(usedOnCard(beat), cardUsed - resident);
    // Nothing of it is held in host RAM any more, before any reconcile looks.
    const metrics = await agent.metrics();
    assert.match(metrics, /^gpushards_agent_suspended_bytes 0$/m);
    assert.match(metrics, /^gpushards_agent_suspended_shards\{memory="suspended"\} 0$/m);
    const container = await reconciled('m-notebook');
    assert.equal(container?.status, 'exited');
    assert.equal(container?.memory, undefined);

    const again = await controlPlane.command(HOST, {
      type: 'suspend',
      shardId: 'm-notebook',
      cause: 'suspend-requested',
    });
    assert.equal(again.ok, false);
    assert.equal(!again.ok && again.error.code, 'NOT_SUSPENDABLE');
    assert.match(!again.ok ? again.error.message : '', /container is not running \(exited\)/);
  });

  it("a suspend past the host's budget is NOT_SUSPENDABLE, naming the budget, says SUSPEND_FAILED why, and moves nothing", async () => {
    const big = await launch(spec('m-big', 4 * GiB, ['/cuda-probe', 'keep', String(KEPT)]));
    await eachProcess(big, 'kept', KEPT, 1);
    const before = controlPlane.states.length;
    const refused = await controlPlane.command(HOST, {
      type: 'suspend',
      shardId: 'm-big',
      cause: 'make-room',
    });
    assert.equal(refused.ok, false);
    assert.equal(!refused.ok && refused.error.code, 'NOT_SUSPENDABLE');
    assert.equal(
      !refused.ok && refused.error.message,
      "this host's budget for suspended shards (3 GiB) has 3 GiB left; shard m-big's caps are 4 GiB",
    );
    docker('kill', '--signal', 'USR1', big);
    const [poke] = await eachProcess(big, 'poke', 1, 1);
    assert.deepEqual({ intact: poke!.intact, result: poke!.result }, { intact: 1, result: 0 });
    // Nothing moved; the one event says why, so that the control plane, which moved the shard
    // to SUSPENDING when it decided, moves it back to RUNNING.
    assert.deepEqual(
      controlPlane
        .statesOf('m-big')
        .filter((e) => controlPlane.states.indexOf(e) >= before)
        .map((e) => [e.state, e.reason]),
      [
        [
          'SUSPEND_FAILED',
          "suspend refused: this host's budget for suspended shards (3 GiB) has 3 GiB left; shard m-big's caps are 4 GiB",
        ],
      ],
    );
    assert.equal(await reconciledMemory('m-big'), 'resident');
  });
});

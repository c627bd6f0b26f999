import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { ShardLaunchSpec, UngovernedComputeMessage } from '@gpushards/protocol';

import type { Agent } from '../create-agent.js';
import { ScriptedControlPlane } from '../testing/control-plane-peer.js';
import { startDockerAgent, type DockerAgentStack } from '../testing/docker-agent.js';
import { docker } from '../testing/docker.js';
import { waitFor } from '../testing/processes.js';

const GiB = 1024 ** 3;
const HOST = `compute-fence-test-${process.pid}`;
const IMAGE = `gpushards-test/compute-fence-probe:${process.pid}`;
/** Conditions, not sleeps: generous for a loaded CI machine. */
const WAIT_MS = 60_000;

/**
 * The compute fence in the real Docker engine with the fake driver and libvgpu.so mounted as
 * the agent mounts them: a shard whose process launches kernels through a libcuda of its own
 * (dlmopen, so no libvgpu.so hook sees them: `cuda-probe bypass`) is seen through the fake
 * NVML's per-process utilization with no launch in its ledger member, and its policy applied;
 * a shard launching as busily through libvgpu.so (`cuda-probe busy`) on the same GPU is never
 * flagged. Everything waits on heartbeats, logs and `docker top`, never on time.
 */
describe('compute fence (Docker)', () => {
  let stack: DockerAgentStack | undefined;
  let controlPlane: ScriptedControlPlane;
  let agent: Agent;
  const stateDir = mkdtempSync(join(tmpdir(), 'gpushards-compute-fence-'));
  let gpu0 = '';
  let good = '';

  before(async () => {
    stack = await startDockerAgent({
      hostId: HOST,
      image: IMAGE,
      stateDir,
      gpus: '1xTest GPU:24g',
      options: { computeLedgerDir: join(stateDir, 'ledger'), computeFence: { windowSeconds: 1 } },
    });
    ({ controlPlane, agent } = stack);
    [gpu0 = ''] = agent.inventory.gpus.map((gpu) => gpu.uuid);
    // The well-behaved neighbour, busy through libvgpu.so on the same GPU for both tests.
    good = await launch('f-good', ['/cuda-probe', 'busy', '0'], 'kill', '"busy":1');
  });

  after(async () => {
    await stack?.stop();
  });

  async function launch(
    shardId: string,
    command: string[],
    capPolicy: ShardLaunchSpec['capPolicy'],
    ready: string,
  ): Promise<string> {
    const launched = await controlPlane.command(HOST, {
      type: 'launch',
      shard: {
        shardId,
        teamId: 'team-compute-fence',
        name: shardId,
        image: IMAGE,
        env: {},
        command,
        gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
        capPolicy,
      },
    });
    assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
    const containerId = launched.result.containerId!;
    await waitFor(
      `${shardId}: ${ready} in its logs`,
      () => (docker('logs', containerId).includes(ready) ? true : undefined),
      WAIT_MS,
    );
    return containerId;
  }

  const findings = () => controlPlane.heartbeats.flatMap((beat) => beat.ungovernedCompute ?? []);
  const findingOf = (shardId: string, action: string) =>
    waitFor(
      `a ${action} finding of ungoverned GPU work in ${shardId}`,
      () =>
        findings().find(
          (f: UngovernedComputeMessage) => f.shardId === shardId && f.action === action,
        ),
      WAIT_MS,
    );
  /** Host PIDs of a container's processes running `cuda-probe <mode>`. */
  const probes = (containerId: string, mode: string) =>
    docker('top', containerId, '-o', 'pid,args')
      .split('\n')
      .slice(1)
      .map((line) => line.trim().split(/\s+/))
      .filter(([, program, argument]) => program === '/cuda-probe' && argument === mode)
      .map(([pid]) => Number(pid));
  const assertGoodNeverFlagged = () => {
    assert.deepEqual(
      findings().filter((f) => f.shardId === 'f-good'),
      [],
      'the shard launching through libvgpu.so is never flagged',
    );
    assert.equal(docker('inspect', '-f', '{{.State.Running}}', good), 'true');
  };

  it('report: a shard launching kernels through its own dlmopen of libcuda is reported, with the pid and its smUtil', async () => {
    const bypass = await launch('f-report', ['/cuda-probe', 'bypass', '0'], 'report', '"busy":1');
    const pid = Number(docker('inspect', '-f', '{{.State.Pid}}', bypass));
    const finding = await findingOf('f-report', 'report');
    assert.equal(finding.gpuUuid, gpu0);
    assert.equal(finding.pid, pid, 'the bypassing process (host PID)');
    assert.deepEqual(finding.pids, [pid]);
    assert.ok(finding.smPercent >= 10, `smUtil ${finding.smPercent}`);
    assert.ok(finding.busySamples >= 2);
    assert.equal(finding.thresholdPercent, 10);
    assert.equal(finding.lastKernelSeconds, undefined, 'no launch of it reached its region');
    assert.deepEqual(finding.killedPids, []);
    assert.equal(docker('inspect', '-f', '{{.State.Running}}', bypass), 'true', 'report only');
    assertGoodNeverFlagged();
    docker('rm', '-f', bypass);
  });

  it('kill: the bypassing process is killed, the rest of its shard and the well-behaved neighbour live', async () => {
    const shard = await launch(
      'f-kill',
      ['/cuda-probe', 'hold', String(1 << 20)],
      'kill',
      '{"result":0}',
    );
    docker('exec', '-d', shard, '/cuda-probe', 'bypass', '0');
    const [pid] = await waitFor(
      'the bypassing process in f-kill',
      () => {
        const pids = probes(shard, 'bypass');
        return pids.length > 0 ? pids : undefined;
      },
      WAIT_MS,
    );
    const finding = await findingOf('f-kill', 'kill');
    assert.equal(finding.pid, pid);
    assert.deepEqual(finding.killedPids, [pid]);
    await waitFor(
      'the bypassing process gone',
      () => (probes(shard, 'bypass').length === 0 ? true : undefined),
      WAIT_MS,
    );
    assert.equal(probes(shard, 'hold').length, 1, "the shard's other process lives");
    assert.equal(docker('inspect', '-f', '{{.State.Running}}', shard), 'true');
    assertGoodNeverFlagged();
  });

  it('kill: a bypassing process beside a sibling that keeps launching through libvgpu.so is killed, the sibling lives', async () => {
    // The shard launches through libvgpu.so all the time, so its own stamp is always fresh;
    // the bypass is told apart by its process slot (it has none: it never went through it).
    const shard = await launch('f-mixed', ['/cuda-probe', 'busy', '0'], 'kill', '"busy":1');
    docker('exec', '-d', shard, '/cuda-probe', 'bypass', '0');
    const [pid] = await waitFor(
      'the bypassing process in f-mixed',
      () => {
        const pids = probes(shard, 'bypass');
        return pids.length > 0 ? pids : undefined;
      },
      WAIT_MS,
    );
    const finding = await findingOf('f-mixed', 'kill');
    assert.equal(finding.pid, pid);
    assert.deepEqual(finding.killedPids, [pid], 'only the bypassing process');
    assert.ok(
      finding.lastKernelSeconds !== undefined,
      'the shard itself launched through libvgpu.so',
    );
    await waitFor(
      'the bypassing process gone',
      () => (probes(shard, 'bypass').length === 0 ? true : undefined),
      WAIT_MS,
    );
    assert.equal(probes(shard, 'busy').length, 1, 'the sibling launching through libvgpu.so lives');
    assert.equal(docker('inspect', '-f', '{{.State.Running}}', shard), 'true');
    assertGoodNeverFlagged();
  });
});

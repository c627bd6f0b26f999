import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { ShardLaunchSpec } from '@gpushards/protocol';

import type { Agent } from '../create-agent.js';
import { DEVICES_OFFSET, DEVICE_FIELDS } from '../regions/region-layout.js';
import { ScriptedControlPlane } from '../testing/control-plane-peer.js';
import { startDockerAgent, type DockerAgentStack } from '../testing/docker-agent.js';
import { docker } from '../testing/docker.js';
import { nativeArtifacts } from '../testing/native.js';
import { waitFor } from '../testing/processes.js';

const run = promisify(execFile);
const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const HOST = `pressure-test-${process.pid}`;
const IMAGE = `gpushards-test/pressure-probe:${process.pid}`;
/** Conditions, not sleeps: generous for a loaded CI machine. */
const WAIT_MS = 30_000;

/**
 * Issue #31 in the real Docker engine, end to end: a process outside the interposer in one
 * shard takes the fake card's free memory; a neighbour under its cap then asks for memory, and
 * the driver refuses it. libvgpu.so does not pass the refusal on: it rings its region's
 * pressure bell and retries (for the pressure_wait_ms the agent wrote: the fence's interval
 * plus teardown). The ring makes the fence sample at once, although its next tick is a minute
 * away; the offender is killed, the relief is measured, and the neighbour's allocation, still
 * being retried, succeeds: the neighbour never sees the refusal.
 */
describe('pressure: a neighbour refused memory it was promised (Docker)', () => {
  let stack: DockerAgentStack | undefined;
  let controlPlane: ScriptedControlPlane;
  let agent: Agent;
  const stateDir = mkdtempSync(join(tmpdir(), 'gpushards-pressure-'));
  let gpu0 = '';

  before(async () => {
    stack = await startDockerAgent({
      hostId: HOST,
      image: IMAGE,
      programs: { '/fake-hidden-alloc': nativeArtifacts().find('fake-hidden-alloc') },
      stateDir,
      gpus: '1xTest GPU:8g',
      // One sample at start, the next a minute later: only a ring makes it sample sooner.
      options: { enforcement: { intervalMs: 60_000, toleranceBytes: 64 * MiB } },
    });
    ({ controlPlane, agent } = stack);
    [gpu0 = ''] = agent.inventory.gpus.map((gpu) => gpu.uuid);
  });

  after(async () => {
    await stack?.stop();
  });

  const spec = (shardId: string, limitBytes: number, command: string[]): ShardLaunchSpec => ({
    shardId,
    teamId: 'team-pressure',
    name: shardId,
    image: IMAGE,
    env: {},
    gpus: [{ uuid: gpu0, limitBytes }],
    capPolicy: 'kill',
    command,
  });

  async function launch(shard: ShardLaunchSpec, ready: string): Promise<string> {
    const launched = await controlPlane.command(HOST, { type: 'launch', shard });
    assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
    const containerId = launched.result.containerId!;
    await waitFor(
      `${shard.shardId}: ${ready}`,
      () => (docker('logs', containerId).includes(ready) ? true : undefined),
      WAIT_MS,
    );
    return containerId;
  }

  /** The region's pressure_count of GPU 0, as libvgpu.so rang it. */
  function pressureCount(shardId: string): bigint {
    const region = readFileSync(join(stateDir, 'regions', shardId, 'region'));
    return region.readBigUInt64LE(DEVICES_OFFSET + DEVICE_FIELDS.pressure_count.offset);
  }

  /** The offender's grab, outside the interposer, once it holds the memory. */
  async function grabIn(containerId: string, bytes: number): Promise<void> {
    const child = spawn(
      'docker',
      ['exec', containerId, '/fake-hidden-alloc', '0', String(bytes), 'hold'],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    await waitFor(
      'the grab to take the card',
      () => (out.includes('holding') ? true : undefined),
      WAIT_MS,
    );
  }

  /** One more process of the shard allocates; asynchronous, since the agent runs in this process. */
  const allocate = async (containerId: string, bytes: number) => {
    const { stdout } = await run('docker', [
      'exec',
      containerId,
      '/cuda-probe',
      'alloc',
      String(bytes),
    ]);
    return (JSON.parse(stdout) as { result: number }).result;
  };

  it('the ring makes the fence kill the offender at once; the relief is measured; the neighbour then gets its memory', async () => {
    const neighbour = await launch(
      spec('p-neighbour', 3 * GiB, ['/cuda-probe', 'hold', String(GiB)]),
      '{"result":0}',
    );
    const offender = await launch(
      spec('p-offender', GiB, ['/cuda-probe', 'hold', String(128 * MiB)]),
      '{"result":0}',
    );
    // Outside the interposer: everything the fake card has left but 256 MiB.
    const free = 8 * GiB - 2 * agent.inventory.contextOverheadBytes - GiB - 128 * MiB;
    const grab = free - agent.inventory.contextOverheadBytes - 256 * MiB;
    await grabIn(offender, grab);
    assert.equal(pressureCount('p-neighbour'), 0n);
    // The neighbour, well under its 3 GiB cap, asks for 512 MiB: the driver refuses, libvgpu.so
    // rings and retries, the fence frees the card, and the neighbour never sees the refusal.
    assert.equal(
      await allocate(neighbour, 512 * MiB),
      0,
      'the neighbour gets what it was promised',
    );
    assert.ok(pressureCount('p-neighbour') >= 1n, 'the driver refused it first, and it rang');
    const violation = await waitFor(
      'the offender killed',
      () =>
        controlPlane.heartbeats
          .flatMap((beat) => beat.violations ?? [])
          .find((v) => v.shardId === 'p-offender'),
      WAIT_MS,
    );
    assert.equal(violation.action, 'kill');
    assert.equal(violation.processBytes, grab, 'the process outside the interposer');
    assert.deepEqual(violation.killedPids, [violation.pid]);
    const relief = await waitFor(
      'the relief in a heartbeat',
      () =>
        controlPlane.heartbeats
          .flatMap((beat) => beat.pressureReliefs ?? [])
          .find((r) => r.shardId === 'p-neighbour'),
      WAIT_MS,
    );
    assert.equal(relief.gpuUuid, gpu0);
    assert.deepEqual(relief.killedPids, violation.killedPids);
    assert.ok(relief.reliefSeconds !== undefined && relief.reliefSeconds >= 0);
    assert.equal(JSON.parse(docker('inspect', offender))[0].State.Running, true);
    const metrics = await agent.metrics();
    assert.match(metrics, /^gpushards_agent_pressure_samples_total [1-9]/m);
    assert.match(
      metrics,
      new RegExp(`^gpushards_agent_pressure_relief_seconds_count\\{gpu="${gpu0}"\\} 1$`, 'm'),
    );
  });
});

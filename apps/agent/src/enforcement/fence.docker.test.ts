import assert from 'node:assert/strict';
import { readFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { CapViolationMessage, Heartbeat, ShardLaunchSpec } from '@gpushards/protocol';

import type { Agent } from '../create-agent.js';
import { decodeLimits } from '../limits/limits-file.js';
import { DEVICES_OFFSET, DEVICE_FIELDS } from '../regions/region-layout.js';
import { ScriptedControlPlane } from '../testing/control-plane-peer.js';
import { startDockerAgent, type DockerAgentStack } from '../testing/docker-agent.js';
import { docker } from '../testing/docker.js';
import { nativeArtifacts } from '../testing/native.js';
import { waitFor } from '../testing/processes.js';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const HOST = `fence-test-${process.pid}`;
const IMAGE = `gpushards-test/fence-probe:${process.pid}`;
const TOLERANCE = 64 * MiB;
/** Conditions, not sleeps: generous for a loaded CI machine. */
const WAIT_MS = 30_000;

/**
 * The host fence in the real Docker engine: shards take fake GPU memory libvgpu.so cannot see
 * (native/fakes' fake-hidden-alloc, standing in for graph memory, heaps, local memory or a
 * bypass); the agent sees it through the fake NVML's per-process numbers and applies each
 * shard's policy. Everything waits on heartbeats and state events, never on time.
 */
describe('host fence (Docker)', () => {
  let stack: DockerAgentStack | undefined;
  let controlPlane: ScriptedControlPlane;
  let agent: Agent;
  const stateDir = mkdtempSync(join(tmpdir(), 'gpushards-fence-'));
  let gpu0 = '';
  let gpu1 = '';

  before(async () => {
    stack = await startDockerAgent({
      hostId: HOST,
      image: IMAGE,
      programs: { '/fake-hidden-alloc': nativeArtifacts().find('fake-hidden-alloc') },
      stateDir,
      gpus: '2xTest GPU:24g',
      options: { enforcement: { intervalMs: 100, toleranceBytes: TOLERANCE } },
    });
    ({ controlPlane, agent } = stack);
    [gpu0 = '', gpu1 = ''] = agent.inventory.gpus.map((gpu) => gpu.uuid);
  });

  after(async () => {
    await stack?.stop();
  });

  const spec = (shardId: string, extra: Partial<ShardLaunchSpec> = {}): ShardLaunchSpec => ({
    shardId,
    teamId: 'team-fence',
    name: shardId,
    image: IMAGE,
    env: {},
    gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
    ...extra,
  });

  /** Launches a shard whose main process holds `bytes` through libvgpu.so; resolves to its container. */
  async function launchHolding(
    shardId: string,
    bytes: number,
    extra: Partial<ShardLaunchSpec> = {},
  ): Promise<string> {
    const launched = await controlPlane.command(HOST, {
      type: 'launch',
      shard: spec(shardId, { command: ['/cuda-probe', 'hold', String(bytes)], ...extra }),
    });
    assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
    const containerId = launched.result.containerId!;
    await waitFor(
      `${shardId} to hold its memory`,
      () => (docker('logs', containerId).includes('{"result":0}') ? true : undefined),
      WAIT_MS,
    );
    return containerId;
  }

  const violationOf = (shardId: string, action: string) =>
    waitFor(
      `a ${action} violation of ${shardId}`,
      () =>
        controlPlane.heartbeats
          .flatMap((beat) => beat.violations ?? [])
          .find((v: CapViolationMessage) => v.shardId === shardId && v.action === action),
      WAIT_MS,
    );
  const realOf = (beat: Heartbeat, shardId: string, gpuUuid: string) =>
    beat.shards
      .find((shard) => shard.shardId === shardId)
      ?.realBytesPerGpu?.find((gpu) => gpu.gpuUuid === gpuUuid)?.realBytes;
  /** The first heartbeat after `since` where `check` holds. */
  const heartbeatWhere = (what: string, check: (beat: Heartbeat) => boolean) => {
    const since = controlPlane.heartbeats.length;
    return waitFor(what, () => controlPlane.heartbeats.slice(since).find(check), WAIT_MS);
  };

  it('kill: the hidden allocation past the cap is killed, the shard and its neighbour keep the rest', async () => {
    const context = agent!.inventory.contextOverheadBytes;
    const neighbour = await launchHolding('n-kill', GiB);
    const shard = await launchHolding('s-kill', 256 * MiB, { capPolicy: 'kill' });
    docker('exec', '-d', shard, '/fake-hidden-alloc', '0', String(3 * GiB), 'hold');
    const violation = await violationOf('s-kill', 'kill');
    assert.equal(violation.gpuUuid, gpu0);
    assert.equal(violation.capBytes, 2 * GiB);
    assert.equal(violation.toleranceBytes, TOLERANCE);
    assert.ok(violation.realBytes >= 3 * GiB + 256 * MiB, `real ${violation.realBytes}`);
    assert.equal(violation.processBytes, 3 * GiB, 'the hidden allocator holds the most');
    assert.deepEqual(violation.killedPids, [violation.pid]);
    // The shard is back under its cap with its main process; the neighbour kept everything.
    // A heartbeat built after the kill (one built before may still be on its way) lists both.
    const beat = await heartbeatWhere('s-kill back under its cap, beside its neighbour', (b) => {
      const real = realOf(b, 's-kill', gpu0);
      return real !== undefined && real <= 2 * GiB && realOf(b, 'n-kill', gpu0) !== undefined;
    });
    assert.equal(realOf(beat, 's-kill', gpu0), context + 256 * MiB);
    assert.equal(realOf(beat, 'n-kill', gpu0), context + GiB, 'the neighbour keeps all its memory');
    assert.equal(JSON.parse(docker('inspect', shard))[0].State.Running, true);
    assert.equal(JSON.parse(docker('inspect', neighbour))[0].State.Running, true);
  });

  it('stop: the whole shard stops, and the event says why', async () => {
    const shard = await launchHolding('s-stop', 256 * MiB, { capPolicy: 'stop' });
    docker('exec', '-d', shard, '/fake-hidden-alloc', '0', String(3 * GiB), 'hold');
    const violation = await violationOf('s-stop', 'stop');
    assert.equal(violation.capBytes, 2 * GiB);
    await controlPlane.waitForState('s-stop', 'STOPPED');
    assert.equal(JSON.parse(docker('inspect', shard))[0].State.Running, false);
  });

  it('report: reported once, nothing killed', async () => {
    const shard = await launchHolding('s-report', 256 * MiB, { capPolicy: 'report' });
    docker('exec', '-d', shard, '/fake-hidden-alloc', '0', String(3 * GiB), 'hold');
    const violation = await violationOf('s-report', 'report');
    assert.deepEqual(violation.killedPids, []);
    // A later heartbeat (samples every 100 ms in between) still over: alive, not reported again.
    await heartbeatWhere('a later heartbeat with s-report still over its cap', (b) => {
      const real = realOf(b, 's-report', gpu0);
      return real !== undefined && real > 3 * GiB;
    });
    const reports = controlPlane.heartbeats
      .flatMap((beat) => beat.violations ?? [])
      .filter((v) => v.shardId === 's-report');
    assert.equal(reports.length, 1);
    assert.equal(JSON.parse(docker('inspect', shard))[0].State.Running, true);
  });

  it('a 2-GPU shard past its cap on GPU 1 only: GPU 1 dealt with, GPU 0 untouched', async () => {
    const context = agent!.inventory.contextOverheadBytes;
    const shard = await launchHolding('s-two', GiB, {
      capPolicy: 'kill',
      gpus: [
        { uuid: gpu0, limitBytes: 2 * GiB },
        { uuid: gpu1, limitBytes: 2 * GiB },
      ],
    });
    docker('exec', '-d', shard, '/fake-hidden-alloc', '1', String(3 * GiB), 'hold');
    const violation = await violationOf('s-two', 'kill');
    assert.equal(violation.gpuUuid, gpu1);
    const beat = await heartbeatWhere('s-two back under on GPU 1', (b) => {
      const real = realOf(b, 's-two', gpu1);
      return real !== undefined && real <= 2 * GiB;
    });
    assert.equal(realOf(beat, 's-two', gpu0), context + GiB, 'GPU 0 untouched');
    assert.equal(JSON.parse(docker('inspect', shard))[0].State.Running, true);
  });

  it('root in the container cannot raise its limit: no write, no remount, no unmount', async () => {
    const shard = await launchHolding('s-root', 256 * MiB, { capPolicy: 'report' });
    const result = JSON.parse(
      docker('exec', '--user', '0', shard, '/cuda-probe', 'tamper', '/etc/gpushards/limits'),
    ) as Record<string, number>;
    const EROFS = 30;
    const EPERM = 1;
    assert.deepEqual(result, { write: EROFS, remount: EPERM, umount: EPERM });
    assert.equal(
      decodeLimits(readFileSync(join(stateDir, 'limits', 's-root')))[0]?.limitBytes,
      2 * GiB,
    );
  });

  it('zeroed usage counters do not let a shard pass; the correction turns hidden growth into a clean OOM', async () => {
    const shard = await launchHolding('s-oom', 256 * MiB, { capPolicy: 'report' });
    // Hidden memory under cap + tolerance: nothing to act on, but the shard's room shrinks.
    docker('exec', '-d', shard, '/fake-hidden-alloc', '0', String(1200 * MiB), 'hold');
    await waitFor(
      'the real usage in the limits file',
      () => {
        const real =
          decodeLimits(readFileSync(join(stateDir, 'limits', 's-oom')))[0]?.realBytes ?? 0;
        return real >= 1200 * MiB ? real : undefined;
      },
      WAIT_MS,
    );
    // What a tenant could do to the writable region: zero every counter it has.
    const regionFile = join(stateDir, 'regions', 's-oom', 'region');
    const region = readFileSync(regionFile);
    region.writeBigUInt64LE(0n, DEVICES_OFFSET + DEVICE_FIELDS.used_bytes.offset);
    writeFileSync(regionFile, region);
    // Charged by libvgpu.so: about 600 MiB and a 500 MiB allocation would fit under 2 GiB;
    // against the real 1.8 GiB it does not.
    const alloc = JSON.parse(docker('exec', shard, '/cuda-probe', 'alloc', String(500 * MiB)));
    assert.equal(alloc.result, 2, 'CUDA_ERROR_OUT_OF_MEMORY');
  });
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Heartbeat, ShardLaunchSpec } from '@gpushards/protocol';

import type { Agent } from '../create-agent.js';
import { decodeLimits } from '../limits/limits-file.js';
import { LIMITS_COMPUTE_TURNS_GPU, LIMITS_HEADER_FIELDS } from '../limits/limits-layout.js';
import { ScriptedControlPlane } from '../testing/control-plane-peer.js';
import { startDockerAgent, type DockerAgentStack } from '../testing/docker-agent.js';
import { docker } from '../testing/docker.js';
import { waitFor } from '../testing/processes.js';
import {
  decodeLedger,
  LEDGER_HEADER_SIZE,
  LEDGER_MEMBER_FIELDS,
  LEDGER_MEMBER_SIZE,
  LEDGER_MEMBERS,
} from './ledger-activity.js';

const GiB = 1024 ** 3;
const HOST = `compute-test-${process.pid}`;
const IMAGE = `gpushards-test/compute-probe:${process.pid}`;
/** Conditions, not sleeps: generous for a loaded CI machine. */
const WAIT_MS = 30_000;

/**
 * A shard's compute share from the launch spec to libvgpu.so, in the real Docker engine with
 * the fake driver (its launches take simulated kernel time): the agent writes the share into
 * the shard's limits file, libvgpu.so in the container takes its turns on the GPU's ledger
 * with it, a resize changes it live, and the heartbeat carries each shard's activity. The
 * agent runs with its default turns, on the GPU: libvgpu.so in a container, which reads no
 * compute setting from the shard's environment, queues the shard's launches behind its gate
 * while a neighbour holds the turn.
 */
describe('compute share through the agent (Docker)', () => {
  let stack: DockerAgentStack | undefined;
  let controlPlane: ScriptedControlPlane;
  let agent: Agent;
  const stateDir = mkdtempSync(join(tmpdir(), 'gpushards-compute-'));
  const ledgerDir = join(stateDir, 'ledger');
  let gpu0 = '';

  before(async () => {
    stack = await startDockerAgent({
      hostId: HOST,
      image: IMAGE,
      stateDir,
      gpus: '1xTest GPU:24g',
      options: { computeLedgerDir: ledgerDir },
    });
    ({ controlPlane, agent } = stack);
    [gpu0 = ''] = agent.inventory.gpus.map((gpu) => gpu.uuid);
  });

  after(async () => {
    await stack?.stop();
  });

  const spec = (shardId: string, extra: Partial<ShardLaunchSpec> = {}): ShardLaunchSpec => ({
    shardId,
    teamId: 'team-compute',
    name: shardId,
    image: IMAGE,
    env: {},
    gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
    ...extra,
  });
  const limitsOf = (shardId: string) =>
    decodeLimits(readFileSync(join(stateDir, 'limits', shardId)))[0]!;
  /** The GPU's ledger member of a shard: its share and mode as libvgpu.so took them. */
  const memberOf = (shardId: string) => {
    const file = readdirSync(ledgerDir).find((f) => /^GPU-[0-9a-f-]{36}$/i.test(f));
    if (file === undefined) return undefined;
    const buffer = readFileSync(join(ledgerDir, file));
    const member = decodeLedger(buffer).find((m) => m.shardId === shardId);
    if (member === undefined) return undefined;
    let mode: number | undefined;
    for (let i = 0; i < LEDGER_MEMBERS; i++) {
      const base = LEDGER_HEADER_SIZE + i * LEDGER_MEMBER_SIZE;
      const end = buffer.indexOf(0, base);
      if (buffer.subarray(base, end).toString('utf8') === shardId) {
        mode = buffer.readUInt32LE(base + LEDGER_MEMBER_FIELDS.mode.offset);
      }
    }
    return { ...member, mode };
  };
  /** What any shard of the host can do to another's member: erase its last-launch stamp. */
  const eraseLastKernel = (shardId: string) => {
    const file = readdirSync(ledgerDir).find((f) => /^GPU-[0-9a-f-]{36}$/i.test(f))!;
    const buffer = readFileSync(join(ledgerDir, file));
    for (let i = 0; i < LEDGER_MEMBERS; i++) {
      const base = LEDGER_HEADER_SIZE + i * LEDGER_MEMBER_SIZE;
      if (buffer.subarray(base, buffer.indexOf(0, base)).toString('utf8') === shardId) {
        buffer.writeBigUInt64LE(0n, base + LEDGER_MEMBER_FIELDS.last_kernel_ns.offset);
      }
    }
    writeFileSync(join(ledgerDir, file), buffer);
  };
  const logsOf = (containerId: string, text: string) =>
    waitFor(
      `${text} in the logs`,
      () => (docker('logs', containerId).includes(text) ? true : undefined),
      WAIT_MS,
    );

  it('launch writes the share into the limits file; the container takes its turns with it; resize changes it live', async () => {
    const launched = await controlPlane.command(HOST, {
      type: 'launch',
      shard: spec('c-share', {
        command: ['/cuda-probe', 'launch', '200', 'hold'],
        compute: { sharePermille: 250, mode: 'capped' },
      }),
    });
    assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
    const containerId = launched.result.containerId!;
    await logsOf(containerId, '{"launched":200,"result":0}');
    const limits = limitsOf('c-share');
    assert.equal(limits.computeSharePermille, 250);
    assert.equal(limits.computeMode, 'capped');
    const member = memberOf('c-share');
    assert.equal(member?.sharePermille, 250, 'libvgpu.so took the share from the limits file');
    assert.equal(member?.mode, 2, 'capped');
    assert.ok(member!.busyNs > 0n, 'its GPU time is charged');

    const resized = await controlPlane.command(HOST, {
      type: 'resize',
      shardId: 'c-share',
      gpus: [{ uuid: gpu0, limitBytes: 2 * GiB }],
      compute: { sharePermille: 600, mode: 'guaranteed' },
    });
    assert.ok(resized.ok, JSON.stringify(resized));
    assert.equal(limitsOf('c-share').computeSharePermille, 600);
    assert.equal(limitsOf('c-share').computeMode, 'guaranteed');
    // The running shard's next turn re-reads it: another process of the shard launches.
    const out = docker('exec', containerId, '/cuda-probe', 'launch', '50');
    assert.match(out, /"launched":50,"result":0/);
    const after = memberOf('c-share');
    assert.equal(after?.sharePermille, 600);
    assert.equal(after?.mode, 1, 'guaranteed');

    // A process of the shard that asks, in its own environment, for another ledger, another
    // shard's entry, a full share and long turns still launches under its own shard's entry,
    // in the host's ledger, with the share the limits file gives.
    const hostile = docker(
      'exec',
      ...['-e', 'GPUSHARDS_LEDGER_DIR=/tmp/private-ledger', '-e', 'GPUSHARDS_SHARD_ID=c-idle'],
      ...['-e', 'GPUSHARDS_COMPUTE_SHARE=100', '-e', 'GPUSHARDS_COMPUTE_SLICE_US=1000000'],
      ...[containerId, '/cuda-probe', 'launch', '50'],
    );
    assert.match(hostile, /"launched":50,"result":0/);
    const own = memberOf('c-share');
    assert.ok(own!.lastKernelNs > after!.lastKernelNs, "it launched under its own shard's entry");
    assert.equal(own?.sharePermille, 600, "with the limits file's share");
    assert.equal(memberOf('c-idle'), undefined, "it took no entry under another shard's id");
  });

  it("heartbeats carry each shard's activity: a launching shard's last kernel, 0 busy for one that never launched", async () => {
    const idle = await controlPlane.command(HOST, {
      type: 'launch',
      shard: spec('c-idle', { command: ['/cuda-probe', 'hold', String(GiB / 4)] }),
    });
    assert.ok(idle.ok && idle.result.type === 'launch', JSON.stringify(idle));
    await logsOf(idle.result.containerId!, '{"result":0}');
    const since = controlPlane.heartbeats.length;
    const activityOf = (beat: Heartbeat, shardId: string) =>
      beat.shards.find((s) => s.shardId === shardId)?.activityPerGpu?.[0];
    const beat = await waitFor(
      'a heartbeat with both shards',
      () =>
        controlPlane.heartbeats
          .slice(since)
          .find((b) => activityOf(b, 'c-share') && activityOf(b, 'c-idle')),
      WAIT_MS,
    );
    const busy = activityOf(beat, 'c-share')!;
    assert.equal(busy.gpuUuid, gpu0);
    assert.ok(busy.lastKernelSeconds !== undefined && busy.lastKernelSeconds >= 0);
    assert.deepEqual(activityOf(beat, 'c-idle'), { gpuUuid: gpu0, busyRatio: 0 });

    // A neighbour erases the shard's stamp in the shared ledger: its last launch still comes
    // from its own region, so the idle policy is not fooled into stopping it.
    eraseLastKernel('c-share');
    assert.equal(memberOf('c-share')?.lastKernelNs, 0n);
    const later = controlPlane.heartbeats.length;
    const after = await waitFor(
      'a heartbeat after the erasure',
      () => controlPlane.heartbeats.slice(later).find((b) => activityOf(b, 'c-share')),
      WAIT_MS,
    );
    const still = activityOf(after, 'c-share')!;
    assert.ok(
      still.lastKernelSeconds !== undefined && still.lastKernelSeconds >= busy.lastKernelSeconds!,
      JSON.stringify(still),
    );
  });

  it("the host's default turns on the GPU reach a shard: its launches queue behind its gate while a busy neighbour holds the turn", async () => {
    const launchWaiting = async (shardId: string, command: string[], ready: string) => {
      const launched = await controlPlane.command(HOST, {
        type: 'launch',
        shard: spec(shardId, { command }),
      });
      assert.ok(launched.ok && launched.result.type === 'launch', JSON.stringify(launched));
      await logsOf(launched.result.containerId!, ready);
      return launched.result.containerId!;
    };
    const turnsOf = (shardId: string) =>
      readFileSync(join(stateDir, 'limits', shardId)).readUInt32LE(
        LIMITS_HEADER_FIELDS.compute_turns.offset,
      );
    await launchWaiting('t-busy', ['/cuda-probe', 'busy', '0'], '{"busy":1}');
    const gated = await launchWaiting(
      't-gated',
      ['/cuda-probe', 'hold', String(GiB / 4)],
      '{"result":0}',
    );
    assert.equal(turnsOf('t-busy'), LIMITS_COMPUTE_TURNS_GPU);
    assert.equal(turnsOf('t-gated'), LIMITS_COMPUTE_TURNS_GPU);
    // Another process of the shard, its statistics on (read inside a shard too), launches
    // while t-busy holds the turn; its environment says nothing about turns.
    const run = spawnSync(
      'docker',
      ['exec', '-e', 'GPUSHARDS_COMPUTE_STATS=1', gated, '/cuda-probe', 'launch', '200'],
      { encoding: 'utf8' },
    );
    assert.match(run.stdout, /"launched":200,"result":0/, run.stderr);
    const queued = /launches queued behind the gate (\d+)/.exec(run.stderr);
    assert.ok(queued !== null, `no statistics: ${run.stderr}`);
    assert.ok(Number(queued[1]) > 0, `nothing queued behind the gate: ${run.stderr}`);
  });
});

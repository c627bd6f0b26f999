import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, it } from 'node:test';

import type { CapPolicy } from '@gpushards/limits';

import type { AgentConfig } from '../config/agent-options.js';
import type { GpuUtilizationSample } from '../gpus/gpu-backends.js';
import { ProcessOwners } from '../enforcement/process-owners.js';
import type { GpusService } from '../gpus/gpus.service.js';
import type { LimitsService } from '../limits/limits.service.js';
import { createLogger } from '../logging/logger.js';
import type { ShardRecord } from '../shards/shard-record.js';
import type { ShardsService } from '../shards/shards.service.js';
import {
  ComputeFenceService,
  computeFenceOffReason,
  type ComputeFindingRecord,
} from './compute-fence.service.js';
import type { RegionDevice, RegionProcess } from '../regions/region-file.js';
import type { RegionsService } from '../regions/regions.service.js';
import {
  LEDGER_HEADER_SIZE,
  LEDGER_MAGIC,
  LEDGER_MEMBER_FIELDS,
  LEDGER_MEMBER_SIZE,
  LEDGER_MEMBERS,
  LEDGER_SIZE,
  LEDGER_VERSION,
} from './ledger-activity.js';

const GPU0 = 'GPU-fa4e5000-0000-4000-8000-000000000000';
const CONTAINER_GOOD = 'a'.repeat(64);
const CONTAINER_BAD = 'b'.repeat(64);
const S = 1_000_000_000n;
const work = mkdtempSync(join(tmpdir(), 'gpushards-compute-fence-'));
const procRoot = join(work, 'proc');
const children: ChildProcess[] = [];
after(() => rmSync(work, { recursive: true, force: true }));
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

/** A real process (so SIGKILL really lands) that a fake /proc puts in `containerId`. */
function processIn(containerId: string): ChildProcess {
  const child = spawn('sleep', ['600'], { stdio: 'ignore' });
  children.push(child);
  const dir = join(procRoot, String(child.pid));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'cgroup'), `0::/docker/${containerId}\n`);
  return child;
}

/**
 * One GPU's ledger file with these members' last launches: what a neighbour could write there
 * (every shard can), which the fence must not believe.
 */
function writeLedger(dir: string, members: { shard: string; lastKernelNs: bigint }[]): void {
  const b = Buffer.alloc(LEDGER_SIZE);
  b.writeBigUInt64LE(LEDGER_MAGIC, 0);
  b.writeUInt32LE(LEDGER_VERSION, 8);
  b.writeUInt32LE(LEDGER_MEMBERS, 12);
  members.forEach((m, i) => {
    const base = LEDGER_HEADER_SIZE + i * LEDGER_MEMBER_SIZE;
    b.write(m.shard, base, 'utf8');
    b.writeBigUInt64LE(m.lastKernelNs, base + LEDGER_MEMBER_FIELDS.last_kernel_ns.offset);
  });
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, GPU0.toLowerCase()), b);
}

function setUp(name: string, policy: CapPolicy, extra: Partial<AgentConfig> = {}) {
  const ledgerDir = join(work, name, 'ledger');
  const config = {
    hostId: 'box-1',
    stateDir: join(work, name),
    computeLedgerDir: ledgerDir,
    computeFence: { windowSeconds: 5, thresholdPercent: 10 },
    enforcement: { intervalMs: 0, toleranceBytes: 0, allowedProcesses: [], procRoot },
    ...extra,
  } as unknown as AgentConfig;
  let samples: GpuUtilizationSample[] | 'unsupported' = [];
  const asked: number[] = [];
  const gpus = {
    inventory: { gpus: [{ index: 0, uuid: GPU0 }] },
    canonicalUuid: (uuid: string) => (uuid.toLowerCase() === GPU0.toLowerCase() ? GPU0 : uuid),
    processUtilization: (_index: number, sinceUs: number) => {
      asked.push(sinceUs);
      return samples;
    },
  } as unknown as GpusService;
  const records: ShardRecord[] = [
    {
      shardId: 'good',
      teamId: 't1',
      containerId: CONTAINER_GOOD,
      state: 'RUNNING',
      gpuUuids: [GPU0],
    },
    {
      shardId: 'bad',
      teamId: 't2',
      containerId: CONTAINER_BAD,
      state: 'RUNNING',
      gpuUuids: [GPU0],
    },
  ];
  const stopped: string[] = [];
  const shards = {
    list: () => records,
    stop: (shardId: string) => {
      stopped.push(shardId);
      return Promise.resolve({ wasRunning: true });
    },
  } as unknown as ShardsService;
  const limits = {
    all: () => records.map((r) => ({ shardId: r.shardId, policy, capBytes: new Map() })),
  } as unknown as LimitsService;
  /** The good shard's own region: its last launch through libvgpu.so on GPU 0. */
  let goodLastLaunchNs = 0n;
  const devicesOf = (shardId: string): RegionDevice[] =>
    shardId === 'good' && goodLastLaunchNs > 0n
      ? [{ uuid: GPU0, lastLaunchNs: goodLastLaunchNs } as RegionDevice]
      : [];
  /** Each region read: "<shard> devices" (the device table) or "<shard> whole" (with slots). */
  const regionReads: string[] = [];
  const regions = {
    devices: (shardId: string): Promise<RegionDevice[]> => {
      regionReads.push(`${shardId} devices`);
      return Promise.resolve(devicesOf(shardId));
    },
    // No slots: each process is judged with its shard (process-launches.test.ts and the
    // Docker test cover the process-by-process rule).
    devicesAndProcesses: (
      shardId: string,
    ): Promise<{ devices: RegionDevice[]; processes: RegionProcess[] }> => {
      regionReads.push(`${shardId} whole`);
      return Promise.resolve({ devices: devicesOf(shardId), processes: [] });
    },
  } as unknown as RegionsService;
  let monotonic = 1000n * S;
  let wall = 1_795_000_000_000_000;
  const clock = { monotonicNs: () => monotonic, wallUs: () => wall };
  const fence = new ComputeFenceService(
    config,
    gpus,
    shards,
    limits,
    regions,
    new ProcessOwners(procRoot),
    createLogger('silent', 'box-1'),
    clock,
  );
  const heard: ComputeFindingRecord[] = [];
  fence.onFindings((records) => heard.push(...records));
  /**
   * One window of five polls, each returning `perPoll`; the good shard's member launched in it
   * (or not, with `goodLaunches` false). Resolves to what closing it did.
   */
  const window = (perPoll: GpuUtilizationSample[], goodLaunches = true) => {
    const start = monotonic;
    for (let i = 0; i < 5; i++) {
      monotonic += S;
      wall += 1_000_000;
      samples = perPoll.map((s) => ({ ...s, timestampUs: wall }));
      fence.poll();
    }
    goodLastLaunchNs = goodLaunches ? start + S : 1n;
    // A neighbour's forgery in the shared ledger, the other way round: the bad shard stamped
    // as launching, the good one's stamp erased.
    writeLedger(ledgerDir, [
      { shard: 'bad', lastKernelNs: start + S },
      { shard: 'good', lastKernelNs: 0n },
    ]);
    return fence.closeWindow();
  };
  fence.begin();
  return {
    fence,
    heard,
    stopped,
    asked,
    regionReads,
    window,
    unsupported: () => {
      samples = 'unsupported';
    },
  };
}

describe('ComputeFenceService', () => {
  it('is off without a ledger, with the window at 0, and under MPS (saying why)', () => {
    const base = {
      computeLedgerDir: '/run/ledger',
      computeFence: { windowSeconds: 5, thresholdPercent: 10 },
    };
    const reason = (extra: object) => computeFenceOffReason({ ...base, ...extra } as AgentConfig);
    assert.equal(reason({}), undefined);
    assert.match(reason({ computeLedgerDir: undefined })!, /no compute ledger/);
    assert.match(
      reason({ computeFence: { windowSeconds: 0, thresholdPercent: 10 } })!,
      /GPUSHARDS_COMPUTE_FENCE_SECONDS is 0/,
    );
    assert.match(
      reason({ mps: { pipeDir: '/tmp/nvidia-mps', isolatedPercent: 40 } })!,
      /MPS partition: NVML attributes every MPS client's work to the MPS server's pid/,
    );
    const { fence } = setUp('mps', 'report', {
      mps: { pipeDir: '/tmp/nvidia-mps', isolatedPercent: 40 },
    });
    assert.equal(fence.enabled, false);
  });

  it('report: the bypassing shard is reported once per episode, never its well-behaved neighbour, whatever the shared ledger says', async () => {
    const { window, heard, asked, regionReads } = setUp('report', 'report');
    const good = processIn(CONTAINER_GOOD);
    const bad = processIn(CONTAINER_BAD);
    const busy = [
      { pid: good.pid!, timestampUs: 0, smPercent: 40 },
      { pid: bad.pid!, timestampUs: 0, smPercent: 60 },
    ];
    assert.deepEqual(await window(busy), [], 'one window alone is no finding');
    assert.deepEqual(regionReads.splice(0), ['good whole', 'bad whole'], 'each busy region once');
    const done = await window(busy);
    assert.equal(done.length, 1);
    const [record] = done;
    assert.equal(record!.shardId, 'bad');
    assert.equal(record!.teamId, 't2');
    assert.equal(record!.action, 'report');
    assert.equal(record!.gpuUuid, GPU0);
    assert.deepEqual(record!.processes, [{ pid: bad.pid, smPercent: 60, samples: 5 }]);
    assert.equal(record!.busyPercent, 60);
    assert.equal(record!.windowSeconds, 5);
    assert.equal(record!.lastKernelSeconds, undefined, 'its region has no launch');
    assert.deepEqual(record!.killedPids, []);
    assert.deepEqual(heard, done);
    assert.deepEqual(await window(busy), [], 'reported once per episode');
    assert.equal(bad.exitCode, null, 'report kills nothing');
    // NVML was asked from the last stamp it gave.
    assert.ok(asked.length === 15 && asked.at(-1)! > asked[0]!);
    // A quiet window ends the episode; the next bypass is reported again.
    assert.deepEqual(await window([busy[0]!]), []);
    await window(busy);
    assert.equal((await window(busy)).length, 1);
  });

  it('kill: SIGKILL to the bypassing process only; a neighbour idle in the ledger but busy is spared while it launches', async () => {
    const { window } = setUp('kill', 'kill');
    const good = processIn(CONTAINER_GOOD);
    const bad = processIn(CONTAINER_BAD);
    const quiet = processIn(CONTAINER_BAD); // the same shard, below the threshold
    const samples = [
      { pid: good.pid!, timestampUs: 0, smPercent: 90 },
      { pid: bad.pid!, timestampUs: 0, smPercent: 70 },
      { pid: quiet.pid!, timestampUs: 0, smPercent: 2 },
    ];
    await window(samples);
    const exited = once(bad, 'exit');
    const [record, ...rest] = await window(samples);
    assert.deepEqual(rest, []);
    assert.equal(record!.action, 'kill');
    assert.deepEqual(record!.killedPids, [bad.pid]);
    assert.deepEqual(await exited, [null, 'SIGKILL']);
    assert.equal(good.exitCode, null, 'the shard that launched through libvgpu.so lives');
    assert.equal(quiet.exitCode, null, 'a process of the shard below the threshold lives');
    // Its last samples may still come: no second kill of it.
    assert.deepEqual(await window(samples), []);
  });

  it('a shard whose member stopped launching is found like one with no member; stop stops it once', async () => {
    const { window, stopped, regionReads } = setUp('stop', 'stop');
    const good = processIn(CONTAINER_GOOD);
    const samples = [{ pid: good.pid!, timestampUs: 0, smPercent: 50 }];
    await window(samples, false);
    assert.deepEqual(
      regionReads.splice(0),
      ['good whole', 'bad devices'],
      'an idle shard: no slots',
    );
    const [record] = await window(samples, false);
    assert.equal(record!.shardId, 'good');
    assert.equal(record!.action, 'stop');
    assert.ok(record!.lastKernelSeconds! > 5, 'its last launch came before the window');
    assert.deepEqual(stopped, ['good']);
    assert.deepEqual(await window(samples, false), []);
    assert.deepEqual(stopped, ['good'], 'once');
    assert.equal(good.exitCode, null, 'stop goes through the shard, not a signal');
  });

  it('turns itself off when the GPU library gives no per-process utilization', () => {
    const { fence, unsupported } = setUp('unsupported', 'report');
    assert.equal(fence.enabled, true);
    unsupported();
    fence.poll();
    assert.equal(fence.enabled, false);
  });
});

import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, it } from 'node:test';

import type { AgentConfig } from '../config/agent-options.js';
import type { GpuProcessSample } from '../gpus/gpu-backends.js';
import type { GpusService } from '../gpus/gpus.service.js';
import { decodeLimits } from '../limits/limits-file.js';
import { LimitsService } from '../limits/limits.service.js';
import { createLogger } from '../logging/logger.js';
import { AgentMetrics } from '../metrics/agent-metrics.js';
import type { PressureRing, RegionWatchService } from '../regions/region-watch.service.js';
import type { ShardRecord } from '../shards/shard-record.js';
import type { ShardsService } from '../shards/shards.service.js';
import { EnforcementService } from './enforcement.service.js';
import { PRESSURE_SAMPLE_GAP_MS } from './fence-pressure.js';
import { ProcessOwners } from './process-owners.js';

const MiB = 1024 ** 2;
const GPU0 = 'GPU-fa4e5000-0000-4000-8000-000000000000';
const GPU1 = 'GPU-fa4e5000-0000-4000-8000-000000000001';
const CONTAINER_A = 'a'.repeat(64);
const CONTAINER_B = 'b'.repeat(64);
const work = mkdtempSync(join(tmpdir(), 'gpushards-enforce-'));
const procRoot = join(work, 'proc');
const children: ChildProcess[] = [];
after(() => rmSync(work, { recursive: true, force: true }));
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

/** A real process (so SIGKILL really lands) that a fake /proc puts in `containerId`. */
function processIn(containerId: string | undefined, command = 'sleep'): ChildProcess {
  const child = spawn('sleep', ['600'], { stdio: 'ignore' });
  children.push(child);
  const dir = join(procRoot, String(child.pid));
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'cgroup'),
    containerId ? `0::/docker/${containerId}\n` : '0::/user.slice\n',
  );
  writeFileSync(join(dir, 'comm'), `${command}\n`);
  return child;
}

function setUp(stateDir: string, intervalMs = 0) {
  const config = {
    hostId: 'box-1',
    stateDir,
    enforcement: { intervalMs, toleranceBytes: 10 * MiB, allowedProcesses: ['Xorg'], procRoot },
  } as unknown as AgentConfig;
  const logger = createLogger('silent', 'box-1');
  let samples: GpuProcessSample[] = [];
  /** The PIDs each listing was asked to watch (their GPUs listed afresh). */
  const watched: number[][] = [];
  /** The GPUs each listing was asked to list afresh (a pressure ring). */
  const fresh: string[][] = [];
  const gpus = {
    inventory: { gpus: [{ uuid: GPU0 }, { uuid: GPU1 }] },
    canonicalUuid: (uuid: string) => uuid,
    hostIndex: (uuid: string) => [GPU0, GPU1].indexOf(uuid),
    processes: (watch?: ReadonlySet<number>, afresh?: ReadonlySet<string>) => {
      watched.push([...(watch ?? [])]);
      fresh.push([...(afresh ?? [])]);
      return samples;
    },
  } as unknown as GpusService;
  let ring: ((ring: PressureRing) => void) | undefined;
  const regionWatch = {
    onPressure: (listener: (ring: PressureRing) => void) => {
      ring = listener;
    },
  } as unknown as RegionWatchService;
  const metrics = new AgentMetrics();
  const records: ShardRecord[] = [
    {
      shardId: 'a',
      teamId: 't1',
      containerId: CONTAINER_A,
      state: 'RUNNING',
      gpuUuids: [GPU0, GPU1],
    },
    { shardId: 'b', teamId: 't2', containerId: CONTAINER_B, state: 'RUNNING', gpuUuids: [GPU0] },
  ];
  const stopped: string[] = [];
  const shards = {
    list: () => records,
    stop: (shardId: string) => {
      stopped.push(shardId);
      return Promise.resolve({ wasRunning: true });
    },
  } as unknown as ShardsService;
  const limits = new LimitsService(config, logger);
  const enforcement = new EnforcementService(
    config,
    gpus,
    shards,
    limits,
    new ProcessOwners(procRoot),
    metrics,
    regionWatch,
    logger,
  );
  return {
    enforcement,
    limits,
    stopped,
    watched,
    fresh,
    metrics,
    ring: (pressure: PressureRing) => ring!(pressure),
    setSamples: (next: GpuProcessSample[]) => {
      samples = next;
    },
  };
}

describe('EnforcementService', () => {
  it('a shard adopted through setLimits shows its caps from the moment it is visible, never a cap of 0', async () => {
    const { enforcement, limits, setSamples } = setUp(join(work, 'adopt'));
    const holder = processIn(CONTAINER_B);
    setSamples([{ gpuUuid: GPU0, pid: holder.pid!, bytes: 256 * MiB }]);
    const adopting = limits.setLimits('b', [{ uuid: GPU0, limitBytes: 500 * MiB }], 'kill');
    // The fence reads every entry at each sample: look as it would while the file opens.
    let seen = limits.get('b');
    for (let turn = 0; seen === undefined && turn < 10; turn++) {
      await Promise.resolve();
      seen = limits.get('b');
    }
    assert.deepEqual(seen?.capBytes, new Map([[GPU0, 500 * MiB]]));
    await adopting;
    assert.deepEqual(await enforcement.sampleNow(), [], 'a shard within its cap is left alone');
    assert.equal(holder.exitCode, null);
  });

  it('kills the largest process of the shard past its cap on GPU 1 only; the neighbour keeps its memory', async () => {
    const { enforcement, limits, setSamples, watched } = setUp(join(work, 'kill'));
    await limits.prepare(
      'a',
      [
        { uuid: GPU0, limitBytes: 1000 * MiB },
        { uuid: GPU1, limitBytes: 1000 * MiB },
      ],
      0,
      'kill',
    );
    await limits.prepare('b', [{ uuid: GPU0, limitBytes: 500 * MiB }], 0, 'kill');
    const small = processIn(CONTAINER_A);
    const big = processIn(CONTAINER_A);
    const neighbour = processIn(CONTAINER_B);
    const host = processIn(undefined, 'python');
    const allowed = processIn(undefined, 'Xorg');
    setSamples([
      { gpuUuid: GPU0, pid: small.pid!, bytes: 900 * MiB },
      { gpuUuid: GPU1, pid: small.pid!, bytes: 300 * MiB },
      { gpuUuid: GPU1, pid: big.pid!, bytes: 800 * MiB },
      { gpuUuid: GPU0, pid: neighbour.pid!, bytes: 500 * MiB },
      { gpuUuid: GPU1, pid: host.pid!, bytes: 64 * MiB },
      { gpuUuid: GPU1, pid: allowed.pid!, bytes: 32 * MiB },
    ]);
    const heard: unknown[] = [];
    enforcement.onViolations((violations) => heard.push(...violations));
    const exited = once(big, 'exit');
    const done = await enforcement.sampleNow();
    assert.equal(done.length, 1);
    assert.deepEqual(
      { ...done[0], at: undefined },
      {
        shardId: 'a',
        teamId: 't1',
        gpuUuid: GPU1,
        realBytes: 1100 * MiB,
        capBytes: 1000 * MiB,
        toleranceBytes: 10 * MiB,
        action: 'kill',
        process: { pid: big.pid, bytes: 800 * MiB },
        pids: [big.pid],
        killedPids: [big.pid],
        at: undefined,
      },
    );
    assert.deepEqual(heard, done);
    assert.deepEqual(await exited, [null, 'SIGKILL']);
    assert.equal(small.exitCode, null, 'the smaller process of the shard lives');
    assert.equal(neighbour.exitCode, null, 'the neighbour lives');
    // Real usage went into the limits files, per GPU, and memory of no shard is per GPU.
    const fileA = decodeLimits(readFileSync(limits.file('a')));
    assert.deepEqual(
      fileA.map((d) => d.realBytes),
      [900 * MiB, 1100 * MiB],
    );
    assert.ok(fileA.every((d) => (d.realSampledAtMs ?? 0) > 0));
    const real = enforcement.realUsage()!;
    assert.deepEqual([...real.shards.get('b')!], [[GPU0, 500 * MiB]]);
    assert.deepEqual([...real.unattributed], [[GPU1, 64 * MiB]], 'Xorg is on the allow-list');
    // The next sample still lists the killed process (the driver frees a moment later): no second kill.
    assert.deepEqual(await enforcement.sampleNow(), []);
    // Its GPU is listed afresh while it is listed: its bytes may go to another process within
    // one interval, leaving the GPU's used bytes the same (gpus/listing-gate.ts).
    assert.deepEqual(watched.at(-1), [big.pid]);
  });

  it('stop stops the whole shard once; report reports once per episode', async () => {
    const { enforcement, limits, stopped, setSamples } = setUp(join(work, 'stop'));
    await limits.prepare(
      'a',
      [
        { uuid: GPU0, limitBytes: 100 * MiB },
        { uuid: GPU1, limitBytes: 100 * MiB },
      ],
      0,
      'stop',
    );
    await limits.prepare('b', [{ uuid: GPU0, limitBytes: 100 * MiB }], 0, 'report');
    const a = processIn(CONTAINER_A);
    const b = processIn(CONTAINER_B);
    const over = [
      { gpuUuid: GPU0, pid: a.pid!, bytes: 200 * MiB },
      { gpuUuid: GPU1, pid: a.pid!, bytes: 200 * MiB },
      { gpuUuid: GPU0, pid: b.pid!, bytes: 200 * MiB },
    ];
    setSamples(over);
    const first = await enforcement.sampleNow();
    assert.deepEqual(
      first.map((v) => [v.shardId, v.action]),
      [
        ['a', 'stop'],
        ['b', 'report'],
      ],
    );
    assert.deepEqual(stopped, ['a']);
    assert.equal(b.exitCode, null, 'report kills nothing');
    assert.deepEqual(await enforcement.sampleNow(), [], 'no second stop, no second report');
    setSamples([]);
    assert.deepEqual(await enforcement.sampleNow(), []);
    setSamples(over);
    assert.deepEqual(
      (await enforcement.sampleNow()).map((v) => [v.shardId, v.action]),
      [
        ['a', 'stop'],
        ['b', 'report'],
      ],
      'a new episode is acted on again',
    );
  });

  it('cuts short a sample whose inputs are those of a quiet pass, and acts at once when the cap or the bytes change', async () => {
    const { enforcement, limits, setSamples } = setUp(join(work, 'quiet'));
    await limits.prepare('a', [{ uuid: GPU0, limitBytes: 1000 * MiB }], 0, 'kill');
    const a = processIn(CONTAINER_A);
    setSamples([{ gpuUuid: GPU0, pid: a.pid!, bytes: 500 * MiB }]);
    assert.deepEqual(await enforcement.sampleNow(), []);
    assert.deepEqual(await enforcement.sampleNow(), []);
    assert.deepEqual(enforcement.counts, { full: 1, skipped: 1 }, 'nothing changed: cut short');
    // The bytes change: a full pass, and real_bytes follows.
    setSamples([{ gpuUuid: GPU0, pid: a.pid!, bytes: 600 * MiB }]);
    assert.deepEqual(await enforcement.sampleNow(), []);
    assert.deepEqual(enforcement.counts, { full: 2, skipped: 1 });
    assert.equal(decodeLimits(readFileSync(limits.file('a')))[0]!.realBytes, 600 * MiB);
    // The cap is lowered under what it holds (a resize): the very next sample kills.
    await limits.setLimits('a', [{ uuid: GPU0, limitBytes: 400 * MiB }], undefined);
    const exited = once(a, 'exit');
    const done = await enforcement.sampleNow();
    assert.deepEqual(
      done.map((v) => [v.shardId, v.action, v.killedPids]),
      [['a', 'kill', [a.pid]]],
    );
    assert.deepEqual(await exited, [null, 'SIGKILL']);
    // While the killed PID is still listed, samples are full passes (nothing cut short).
    await enforcement.sampleNow();
    assert.deepEqual(enforcement.counts, { full: 4, skipped: 1 });
  });

  it('a pressure ring samples its GPU at once, afresh; the offender is killed and the relief measured once its memory is gone', async () => {
    const { enforcement, limits, setSamples, fresh, metrics, ring } = setUp(
      join(work, 'pressure'),
      50,
    );
    await limits.prepare('a', [{ uuid: GPU0, limitBytes: 1000 * MiB }], 0, 'kill');
    await limits.prepare('b', [{ uuid: GPU0, limitBytes: 500 * MiB }], 0, 'kill');
    const neighbour = processIn(CONTAINER_A);
    const offender = processIn(CONTAINER_B);
    setSamples([
      { gpuUuid: GPU0, pid: neighbour.pid!, bytes: 400 * MiB },
      { gpuUuid: GPU0, pid: offender.pid!, bytes: 3000 * MiB },
    ]);
    const killed = new Promise<readonly unknown[]>((resolve) => enforcement.onViolations(resolve));
    const exited = once(offender, 'exit');
    // The fence is never started: only the ring makes it sample.
    ring({ shardId: 'a', gpuUuid: GPU0, count: 1n, atNs: process.hrtime.bigint() });
    const [violation] = (await killed) as { shardId: string; killedPids: number[] }[];
    assert.deepEqual([violation!.shardId, violation!.killedPids], ['b', [offender.pid]]);
    assert.deepEqual(fresh.at(-1), [GPU0], 'the rung GPU was listed afresh');
    assert.deepEqual(await exited, [null, 'SIGKILL']);
    assert.equal(neighbour.exitCode, null);
    assert.deepEqual(enforcement.takePressureReliefs(), [], 'its memory is still listed');
    setSamples([{ gpuUuid: GPU0, pid: neighbour.pid!, bytes: 400 * MiB }]);
    await enforcement.sampleNow();
    const [relief, ...more] = enforcement.takePressureReliefs();
    assert.equal(more.length, 0);
    assert.equal(relief!.shardId, 'a');
    assert.equal(relief!.gpuUuid, GPU0);
    assert.deepEqual(relief!.killedPids, [offender.pid]);
    assert.ok(relief!.reliefSeconds! >= 0);
    const text = await metrics.text();
    assert.match(text, new RegExp(`gpushards_agent_pressure_signals_total\\{gpu="${GPU0}"\\} 1`));
    assert.match(
      text,
      new RegExp(`gpushards_agent_pressure_relief_seconds_count\\{gpu="${GPU0}"\\} 1`),
    );
    assert.match(text, /gpushards_agent_pressure_samples_total 1/);
    await enforcement.onModuleDestroy();
  });

  it('a tenant ringing in a loop gets at most one extra sample per GPU per gap', async () => {
    const { enforcement, limits, setSamples, metrics, ring } = setUp(join(work, 'storm'), 50);
    await limits.prepare('a', [{ uuid: GPU0, limitBytes: 1000 * MiB }], 0, 'kill');
    const a = processIn(CONTAINER_A);
    setSamples([{ gpuUuid: GPU0, pid: a.pid!, bytes: 100 * MiB }]);
    const started = performance.now();
    for (let count = 1n; count <= 1000n; count++) {
      ring({ shardId: 'a', gpuUuid: GPU0, count, atNs: process.hrtime.bigint() });
    }
    const elapsed = performance.now() - started;
    const samples = Number((await metrics.pressureSamples.get()).values[0]?.value ?? 0);
    assert.ok(
      samples >= 1 && samples <= Math.ceil(elapsed / PRESSURE_SAMPLE_GAP_MS) + 1,
      `${samples} samples in ${elapsed} ms`,
    );
    assert.equal(a.exitCode, null);
    await enforcement.onModuleDestroy();
  });

  it('memory of no shard on a GPU has a gauge', async () => {
    const { enforcement, setSamples, metrics } = setUp(join(work, 'foreign'));
    const host = processIn(undefined, 'python');
    setSamples([{ gpuUuid: GPU1, pid: host.pid!, bytes: 64 * MiB }]);
    await enforcement.sampleNow();
    const text = await metrics.text();
    assert.match(
      text,
      new RegExp(`gpushards_agent_unattributed_bytes\\{gpu="${GPU1}"\\} ${64 * MiB}`),
    );
    assert.match(text, new RegExp(`gpushards_agent_unattributed_bytes\\{gpu="${GPU0}"\\} 0`));
  });
});

#!/usr/bin/env node
// The host fence on a real GPU (no Docker): the agent's own EnforcementService, LimitsService
// and NvmlBackend over the driver's libnvidia-ml, following plain processes in a cgroup.
//
//   node bench/host-fence/h100.mjs [--interval 50] [--workers 4] [--trials 10] [--cap-gib 4]
//                                  [--tolerance-mib 160] [--python python3] [--idle-seconds 10]
//
// kill: --workers shards (cap --cap-gib each, policy kill), each running h100_worker.py: a
//   PyTorch process that allocates past cap + tolerance in one cudaMalloc at a random phase of
//   the sampling period and holds it. Latency = the agent's SIGKILL (taken when sampleNow hands
//   its violations over, right after process.kill) minus the start of the crossing allocation
//   (upper bound) and minus its return; then the child's reap by its parent (memory freed).
//   Both clocks are CLOCK_MONOTONIC (process.hrtime, time.monotonic_ns).
// cpu: --idle-seconds of sampling at --interval with the workers' last base processes gone and
//   8 holders of 1 GiB each in 8 shards: CPU of sampleNow (agent + NVML) per sample, and the
//   NVML listing alone per GPU.
// Each process joins its shard through a real cgroup v2 (<root>/docker-<64 hex>.scope, which
// process-owners.ts reads from /proc/<pid>/cgroup) when the cgroup filesystem is writable, else
// through a shadow /proc written before the process touches CUDA.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { benchOptions } from '../options.mjs';
import { agentFence, gpusOver } from './agent-fence.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const agentDist = process.env.GPUSHARDS_AGENT_DIST ?? resolve(here, '../../apps/agent/dist');
const values = benchOptions(import.meta.url, {
  options: {
    interval: {
      type: 'string',
      default: '50',
      value: 'count',
      help: "the agent's fence interval, ms",
    },
    workers: {
      type: 'string',
      default: '4',
      value: 'count',
      help: 'worker processes (shards) on the GPU',
    },
    trials: { type: 'string', default: '10', value: 'count', help: 'trials per case' },
    'cap-gib': { type: 'string', default: '4', value: 'number', help: "each shard's cap, GiB" },
    'tolerance-mib': {
      type: 'string',
      default: '160',
      value: 'whole',
      help: "the fence's tolerance, MiB",
    },
    python: {
      type: 'string',
      default: 'python3',
      help: 'the Python with torch that runs the workers',
    },
    'idle-seconds': {
      type: 'string',
      default: '10',
      value: 'number',
      help: 'seconds of the idle case',
    },
  },
  example: 'node bench/host-fence/h100.mjs --trials 3',
});
const MiB = 1024 ** 2;
const intervalMs = Number(values.interval);
const capBytes = Number(values['cap-gib']) * 1024 * MiB;
const toleranceBytes = Number(values['tolerance-mib']) * MiB;

const { Nvml } = await import(join(agentDist, 'gpus/nvml.js'));
const { NvmlBackend } = await import(join(agentDist, 'gpus/gpu-backends.js'));

const work = mkdtempSync(join(tmpdir(), 'gpushards-h100-fence-'));
const cgroupRoot = '/sys/fs/cgroup/gpushards-fence-bench';
let realCgroups = false;
try {
  mkdirSync(cgroupRoot, { recursive: true });
  mkdirSync(join(cgroupRoot, 'probe'));
  rmdirSync(join(cgroupRoot, 'probe'));
  realCgroups = true;
} catch {
  realCgroups = false;
}
const procRoot = realCgroups ? '/proc' : join(work, 'proc');
const backend = new NvmlBackend(Nvml.open('libnvidia-ml.so.1'), 'libcuda.so.1');
const gpu = backend.gpus[0];
let listingNs = 0n;
let listings = 0;
const { enforcement, limits, records } = await agentFence(agentDist, {
  hostId: 'h100-bench',
  stateDir: join(work, 'state'),
  intervalMs,
  toleranceBytes,
  procRoot,
  // The GPUs this script opened, the listing timed.
  gpus: gpusOver(backend, (list) => {
    const t = process.hrtime.bigint();
    try {
      return list();
    } finally {
      listingNs += process.hrtime.bigint() - t;
      listings++;
    }
  }),
});
// CPU of every sample (the agent's timer calls this.sampleNow).
const sampleNow = enforcement.sampleNow.bind(enforcement);
let sampleCpuUs = 0;
let samples = 0;
enforcement.sampleNow = async () => {
  const before = process.cpuUsage();
  try {
    return await sampleNow();
  } finally {
    const spent = process.cpuUsage(before);
    sampleCpuUs += spent.user + spent.system;
    samples++;
  }
};
const killedAt = new Map(); // pid → ns
enforcement.onViolations((done) => {
  const t = process.hrtime.bigint();
  for (const v of done)
    for (const pid of v.killedPids) if (!killedAt.has(pid)) killedAt.set(pid, t);
});

const containerOf = (shardId) => Buffer.from(shardId.padEnd(32, '0')).toString('hex').slice(0, 64);
function joinTarget(shardId) {
  if (!realCgroups) return procRoot;
  const dir = join(cgroupRoot, `docker-${containerOf(shardId)}.scope`);
  mkdirSync(dir, { recursive: true });
  return join(dir, 'cgroup.procs');
}
function shadowJoin(shardId, pid) {
  if (realCgroups) return;
  mkdirSync(join(procRoot, String(pid)), { recursive: true });
  writeFileSync(join(procRoot, String(pid), 'cgroup'), `0::/docker/${containerOf(shardId)}\n`);
}
async function addShard(shardId, cap) {
  records.push({
    shardId,
    teamId: 'bench',
    containerId: containerOf(shardId),
    state: 'RUNNING',
    gpuUuids: [gpu.uuid],
  });
  await limits.prepare(shardId, [{ uuid: gpu.uuid, limitBytes: cap }], 0, 'kill');
}
const pct = (sorted, p) =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
const ms = (ns) => Math.round(Number(ns) / 1e4) / 100;

const trials = [];
const children = new Set();
try {
  const workers = Number(values.workers);
  for (let w = 0; w < workers; w++) await addShard(`w${w}`, capBytes);
  enforcement.start();
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      const shardId = `w${w}`;
      const child = spawn(
        values.python,
        [
          join(here, 'h100_worker.py'),
          joinTarget(shardId),
          values.trials,
          String(capBytes),
          String(toleranceBytes),
          String(intervalMs),
        ],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      children.add(child);
      const byPid = new Map();
      for await (const line of createInterface({ input: child.stdout })) {
        const [word, a, b, c] = line.split(' ');
        if (word === 'trial') shadowJoin(shardId, Number(c));
        else if (word === 'before') byPid.set(Number(a), { pid: Number(a), before: BigInt(b) });
        else if (word === 'after') byPid.get(Number(a)).after = BigInt(b);
        else if (word === 'exit') {
          const t = byPid.get(Number(a)) ?? { pid: Number(a) };
          trials.push({ ...t, exit: BigInt(b), signal: c, killed: killedAt.get(Number(a)) });
        } else console.error(`worker ${w}: ${line}`);
      }
      children.delete(child);
    }),
  );
  const killSamples = samples;
  const killSampleCpu = sampleCpuUs;
  // cpu: 8 holders in 8 more shards, sampled for --idle-seconds (nothing over: the steady state).
  const holders = 8;
  await Promise.all(
    Array.from({ length: holders }, async (_, h) => {
      const shardId = `h${h}`;
      await addShard(shardId, capBytes);
      const child = spawn(
        values.python,
        [
          join(here, 'h100_worker.py'),
          joinTarget(shardId),
          '0',
          String(capBytes),
          String(toleranceBytes),
          String(intervalMs),
        ],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      children.add(child);
      const lines = createInterface({ input: child.stdout });
      for await (const line of lines) {
        const [word, , , pid] = line.split(' ');
        if (word === 'trial') shadowJoin(shardId, Number(pid));
        if (word === 'held') break;
      }
    }),
  );
  const counts = { ...enforcement.counts };
  const listingsBefore = { ...backend.listingCounts };
  samples = 0;
  sampleCpuUs = 0;
  listingNs = 0n;
  listings = 0;
  const usedSeen = [];
  const watch = setInterval(() => usedSeen.push(backend.nvml.memory(0).usedBytes), 50);
  const idleStart = process.hrtime.bigint();
  const idleCpu = process.cpuUsage();
  await new Promise((r) => setTimeout(r, Number(values['idle-seconds']) * 1000));
  const idleWallMs = Number(process.hrtime.bigint() - idleStart) / 1e6;
  clearInterval(watch);
  const idleUsed = process.cpuUsage(idleCpu);
  const idle = {
    mode: 'cpu',
    intervalMs,
    holders,
    processesListed: backend.processes().length,
    samples,
    sampleCpuMsAvg: Math.round(sampleCpuUs / samples) / 1000,
    processCpuPercentOfOneCore:
      Math.round(((idleUsed.user + idleUsed.system) / 1000 / idleWallMs) * 10000) / 100,
    listingMsAvgPerGpu: Math.round(Number(listingNs) / listings / 1e3) / 1000,
    fullPasses: enforcement.counts.full - counts.full,
    cutShort: enforcement.counts.skipped - counts.skipped,
    // GPU listings taken and reused by the listing gate (gpus/listing-gate.ts) while idle.
    gpuListingsTaken: backend.listingCounts.taken - listingsBefore.taken,
    gpuListingsReused: backend.listingCounts.reused - listingsBefore.reused,
    usedBytesDistinct: new Set(usedSeen).size,
    usedBytesSteps: usedSeen.slice(1, 12).map((u, i) => u - usedSeen[i]),
  };
  const good = trials.filter(
    (t) => t.signal === 'SIGKILL' && t.killed !== undefined && t.before !== undefined,
  );
  const fromBefore = good.map((t) => t.killed - t.before).sort((a, b) => (a < b ? -1 : 1));
  const fromAfter = good
    .map((t) => t.killed - (t.after ?? t.before))
    .sort((a, b) => (a < b ? -1 : 1));
  const teardown = good.map((t) => t.exit - t.killed).sort((a, b) => (a < b ? -1 : 1));
  console.log(
    JSON.stringify({
      mode: 'kill',
      gpu: gpu.model ?? gpu.uuid,
      intervalMs,
      cgroups: realCgroups ? 'real cgroup v2' : 'shadow /proc',
      trials: trials.length,
      killedByAgent: good.length,
      others: trials.filter((t) => !good.includes(t)).map((t) => t.signal),
      killFromCrossingStartMs: {
        p50: ms(pct(fromBefore, 50)),
        p99: ms(pct(fromBefore, 99)),
        max: ms(fromBefore.at(-1)),
      },
      killFromCrossingReturnMs: {
        p50: ms(pct(fromAfter, 50)),
        p99: ms(pct(fromAfter, 99)),
        max: ms(fromAfter.at(-1)),
      },
      killToReapMs: {
        p50: ms(pct(teardown, 50)),
        p99: ms(pct(teardown, 99)),
        max: ms(teardown.at(-1)),
      },
      sampleCpuMsAvg: Math.round(killSampleCpu / killSamples) / 1000,
    }),
  );
  console.log(JSON.stringify(idle));
} finally {
  for (const child of children) child.kill('SIGKILL');
  await enforcement.onModuleDestroy();
  await limits.onModuleDestroy();
  backend.close();
  rmSync(work, { recursive: true, force: true });
}

#!/usr/bin/env node
// The host fence's two numbers on the simulated stack (native/fakes, no GPU, no Docker):
//
//   node bench/host-fence/fence.mjs cpu  [--gpus 8] [--processes 64] [--seconds 20] [--interval 250]
//     The agent's sampler (EnforcementService.sampleNow through its own timer) on a host with
//     --gpus fake GPUs and --processes shard processes holding fake memory (one shard each,
//     spread over the GPUs): CPU time of this process over wall time, as % of one core.
//
//   node bench/host-fence/fence.mjs kill [--trials 60] [--interval 100]
//     A shard process takes hidden memory past its cap (fake-hidden-alloc: memory libvgpu.so
//     cannot see); time from when the take has happened (its "took" line) to its death by the
//     agent's SIGKILL (its exit event), p50 / p99 / max. Each trial starts at a random phase of
//     the sampling period.
//
// Both run the agent's own classes from apps/agent/dist with the fake NVML; which shard a
// process is in comes from a shadow /proc holding each PID's cgroup file (what Docker would
// write), so no containers are needed. Build first: npx nx run agent:build and native/.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { benchOptions } from '../options.mjs';
import { agentFence, gpusOver } from './agent-fence.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const agentDist = process.env.GPUSHARDS_AGENT_DIST ?? join(root, 'apps/agent/dist');
const { fakeLibraries, nativeArtifacts } = await import(join(agentDist, 'testing/native.js'));
const values = benchOptions(import.meta.url, {
  positionals: [
    { name: 'mode', default: 'cpu', choices: ['cpu', 'kill'], help: 'which number (above)' },
  ],
  options: {
    gpus: { type: 'string', default: '8', value: 'count', help: 'fake GPUs (cpu; kill uses 1)' },
    processes: { type: 'string', default: '64', value: 'count', help: 'shard processes (cpu)' },
    seconds: { type: 'string', default: '20', value: 'number', help: 'seconds of sampling (cpu)' },
    interval: {
      type: 'string',
      value: 'count',
      help: "the sampler's interval, ms (default: 250 for cpu, 100 for kill)",
    },
    trials: { type: 'string', default: '60', value: 'count', help: 'trials (kill)' },
  },
  example: 'node bench/host-fence/fence.mjs kill --trials 10',
});
const mode = values.mode;
const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const gpuCount = mode === 'kill' ? 1 : Number(values.gpus);

const work = mkdtempSync(join(tmpdir(), 'gpushards-fence-bench-'));
const procRoot = join(work, 'proc');
const fakes = fakeLibraries();
const hiddenAlloc = nativeArtifacts().find('fake-hidden-alloc');
// The fakes read these once, when this process first loads them.
Object.assign(process.env, {
  GPUSHARDS_FAKE_GPUS: Array.from({ length: gpuCount }, () => 'Bench GPU:80g').join(','),
  GPUSHARDS_FAKE_STATE: join(work, 'fake-state'),
});
const { Nvml } = await import(join(agentDist, 'gpus/nvml.js'));
const { NvmlBackend } = await import(join(agentDist, 'gpus/gpu-backends.js'));

const nvml = Nvml.open(fakes.nvml);
const backend = new NvmlBackend(nvml, fakes.cuda);
const intervalMs = Number(values.interval ?? (mode === 'kill' ? 100 : 250));
const { enforcement, limits, records } = await agentFence(agentDist, {
  hostId: 'bench',
  stateDir: join(work, 'state'),
  intervalMs,
  toleranceBytes: 64 * MiB,
  procRoot,
  // The listing's own CPU (the fake NVML here), kept apart from the agent's.
  gpus: gpusOver(backend, (list) => {
    const before = process.cpuUsage();
    try {
      return list();
    } finally {
      const spent = process.cpuUsage(before);
      listingCpuMs += (spent.user + spent.system) / 1000;
    }
  }),
});
const children = new Set();
let listingCpuMs = 0;

/** A process holding hidden fake memory, put in shard `shardId`'s (shadow) cgroup. */
async function holder(shardId, ordinal, bytes) {
  const child = spawn(hiddenAlloc, [String(ordinal), String(bytes), 'hold'], {
    env: { ...process.env, LD_LIBRARY_PATH: fakes.dir },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.add(child);
  child.on('exit', () => children.delete(child));
  const containerId = containerOf(shardId);
  mkdirSync(join(procRoot, String(child.pid)), { recursive: true });
  writeFileSync(join(procRoot, String(child.pid), 'cgroup'), `0::/docker/${containerId}\n`);
  // Read on without closing the pipe (the holder prints again after "took").
  const tookAt = await new Promise((resolveTook, reject) => {
    let output = '';
    child.stdout.on('data', (chunk) => {
      output += chunk;
      if (output.includes('took')) resolveTook(performance.now());
    });
    child.on('exit', (code, signal) =>
      reject(new Error(`holder ended (${code ?? signal}) before taking`)),
    );
  });
  return { child, tookAt };
}

function containerOf(shardId) {
  return Buffer.from(shardId.padEnd(32, '0')).toString('hex').slice(0, 64);
}

async function addShard(shardId, gpuIndex, capBytes) {
  const uuid = backend.gpus[gpuIndex].uuid;
  records.push({
    shardId,
    teamId: 'bench',
    containerId: containerOf(shardId),
    state: 'RUNNING',
    gpuUuids: [uuid],
  });
  await limits.prepare(shardId, [{ uuid, limitBytes: capBytes }], 0, 'kill');
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

try {
  if (mode === 'cpu') {
    const count = Number(values.processes);
    for (let i = 0; i < count; i++) {
      await addShard(`shard-${i}`, i % gpuCount, 4 * GiB);
      await holder(`shard-${i}`, i % gpuCount, 256 * MiB);
    }
    await enforcement.sampleNow(); // warm: cgroup reads, limits files opened
    const seconds = Number(values.seconds);
    let samples = 0;
    const started = performance.now();
    const cpu = process.cpuUsage();
    listingCpuMs = 0;
    const sampleTimes = [];
    while (performance.now() - started < seconds * 1000) {
      const t = performance.now();
      await enforcement.sampleNow();
      sampleTimes.push(performance.now() - t);
      samples++;
      await new Promise((r) => setTimeout(r, Math.max(0, intervalMs - (performance.now() - t))));
    }
    const wall = performance.now() - started;
    const used = process.cpuUsage(cpu);
    // The driver's share: listing every GPU's processes through NVML alone, every time (the
    // fake NVML here; the gate in NvmlBackend.processes reuses listings, this does not).
    const listCpu = process.cpuUsage();
    for (let i = 0; i < 20; i++) for (const gpu of backend.gpus) nvml.processes(gpu.index);
    const listed = process.cpuUsage(listCpu);
    const nvmlMsPerSample = (listed.user + listed.system) / 1000 / 20;
    const cpuMs = (used.user + used.system) / 1000;
    sampleTimes.sort((a, b) => a - b);
    console.log(
      JSON.stringify({
        gpus: gpuCount,
        processes: count,
        intervalMs,
        samples,
        seconds: Math.round(wall / 100) / 10,
        cpuPercentOfOneCore: Math.round((cpuMs / wall) * 10000) / 100,
        cpuMsPerSample: Math.round((cpuMs / samples) * 100) / 100,
        nvmlListMsPerSample: Math.round(nvmlMsPerSample * 100) / 100,
        listingMsPerSample: Math.round((listingCpuMs / samples) * 100) / 100,
        agentOwnMsPerSample: Math.round(((cpuMs - listingCpuMs) / samples) * 100) / 100,
        agentOwnPercentOfOneCore: Math.round(((cpuMs - listingCpuMs) / wall) * 10000) / 100,
        fullPasses: enforcement.counts?.full,
        cutShort: enforcement.counts?.skipped,
        // GPU listings taken and reused by the gate (absent before it).
        gpuListings: backend.listingCounts,
        sampleMsP50: Math.round(percentile(sampleTimes, 50) * 100) / 100,
        sampleMsP99: Math.round(percentile(sampleTimes, 99) * 100) / 100,
      }),
    );
  } else {
    const trials = Number(values.trials);
    await addShard('victim', 0, GiB);
    enforcement.start();
    const latencies = [];
    for (let i = 0; i < trials; i++) {
      // Arrive at a random phase of the sampler's period (right after a kill the next sample is
      // a whole interval away, which would bias every trial towards the worst case).
      await new Promise((r) => setTimeout(r, Math.random() * intervalMs));
      const { child, tookAt } = await holder('victim', 0, 2 * GiB);
      const [, signal] = await once(child, 'exit');
      if (signal !== 'SIGKILL')
        throw new Error(`trial ${i}: ended by ${signal}, not the agent's SIGKILL`);
      latencies.push(performance.now() - tookAt);
    }
    latencies.sort((a, b) => a - b);
    const round = (ms) => Math.round(ms * 10) / 10;
    console.log(
      JSON.stringify({
        intervalMs,
        trials,
        p50Ms: round(percentile(latencies, 50)),
        p99Ms: round(percentile(latencies, 99)),
        maxMs: round(latencies.at(-1)),
      }),
    );
  }
} finally {
  for (const child of children) child.kill('SIGKILL');
  await enforcement.onModuleDestroy();
  await limits.onModuleDestroy();
  backend.close();
  rmSync(work, { recursive: true, force: true });
}

// On a real GPU: what the agent registers as GPU 0's capacity and its context size, and how far back
// NVML's per-process utilization answers (docs/agent.md, "Capacity" and "Compute fence").
// Build the agent first.   node native/gpu-tests/registered_capacity.mjs
import { spawn } from 'node:child_process';
const { Nvml } = await import('../../apps/agent/dist/gpus/nvml.js');
const { NvmlBackend } = await import('../../apps/agent/dist/gpus/gpu-backends.js');
const nvml = Nvml.open('libnvidia-ml.so.1');
const backend = new NvmlBackend(nvml, 'libcuda.so.1');
const MiB = 2 ** 20;
console.log(JSON.stringify({ device: nvml.device(0), memoryV1: nvml.memory(0), registeredMiB: backend.gpus[0].totalBytes / MiB,
  contextMiB: backend.measureContextBytes() / MiB }));
// Buffer depth of per-process utilization: a busy process for 25 s, then ask for k seconds back.
const busy = spawn('python3', ['-c', 'import torch,time\na=torch.randn(4096,4096,device="cuda",dtype=torch.bfloat16)\nt=time.time()\nprint("busy",flush=True)\nwhile time.time()-t<40:\n  torch.mm(a,a); torch.cuda.synchronize()'], { stdio: ['ignore', 'pipe', 'inherit'] });
await new Promise((r) => busy.stdout.once('data', r));
await new Promise((r) => setTimeout(r, 25000));
const depth = {};
for (const k of [1, 2, 3, 5, 8, 12, 20]) {
  const s = (nvml.processUtilization(0, Date.now() * 1000 - k * 1e6) ?? []).filter((x) => x.pid === busy.pid);
  const stamps = s.map((x) => x.timestampUs).sort((a, b) => a - b);
  depth[k] = { samples: s.length, spanS: stamps.length ? (stamps.at(-1) - stamps[0]) / 1e6 : 0, sm: s.map((x) => x.smPercent) };
}
console.log(JSON.stringify({ utilizationHistory: depth }));
busy.kill('SIGKILL');

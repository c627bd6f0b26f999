// Real-GPU check of the agent's NVML per-process utilization binding (apps/agent/src/gpus/nvml.ts;
// build the agent first): a PyTorch matmul loop runs, the binding is polled once a second with the
// last timestamp seen, as the compute fence polls it. Prints one JSON line.
//   node native/gpu-tests/nvml_utilization.mjs
import { spawn } from 'node:child_process';
import { Nvml } from '../../apps/agent/dist/gpus/nvml.js';

const nvml = Nvml.open('libnvidia-ml.so.1');
const worker = spawn('python3', ['-c', `
import torch, time
a = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16); b = torch.randn_like(a)
torch.mm(a, b); torch.cuda.synchronize(); print('ready', flush=True)
t = time.time()
while time.time() - t < 7:
    for _ in range(10): torch.mm(a, b)
    torch.cuda.synchronize()
`], { stdio: ['ignore', 'pipe', 'inherit'] });
await new Promise((resolve) => worker.stdout.on('data', (d) => String(d).includes('ready') && resolve()));
const started = Date.now() * 1000;
let last = started;
const polls = [];
for (let i = 0; i < 5; i++) {
  await new Promise((r) => setTimeout(r, 1000));
  const samples = nvml.processUtilization(0, last);
  polls.push(samples);
  for (const s of samples) last = Math.max(last, s.timestampUs);
}
const mine = polls.flat().filter((s) => s.pid === worker.pid);
const others = polls.flat().filter((s) => s.pid !== worker.pid);
const inWindow = mine.every((s) => s.timestampUs >= started - 1_000_000 && s.timestampUs <= Date.now() * 1000);
console.log(JSON.stringify({ workerPid: worker.pid, polls: polls.map((p) => p.map((s) => [s.pid, s.smPercent])),
  workerSamples: mine.length, meanSm: mine.length ? mine.reduce((a, s) => a + s.smPercent, 0) / mine.length : null,
  timestampsInWindow: inWindow, otherPids: others.length }));
worker.kill();

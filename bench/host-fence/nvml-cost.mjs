// How much each NVML call the fence could use costs on this machine (wall and CPU per call).
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawn } from 'node:child_process';
const here = dirname(fileURLToPath(import.meta.url));
const { Nvml } = await import(join(here, '../../apps/agent/dist/gpus/nvml.js'));
const nvml = Nvml.open('libnvidia-ml.so.1');
const holders = [];
for (let i = 0; i < 8; i++)
  holders.push(
    spawn(
      'python3',
      [
        '-c',
        'import torch,time,sys; x=torch.empty(1<<30,dtype=torch.uint8,device="cuda"); torch.cuda.synchronize(); print("held",flush=True); time.sleep(60)',
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    ),
  );
// One process running kernels, so that per-process utilization has samples to return (the
// compute fence's call; docs/agent.md, "Compute fence").
holders.push(
  spawn(
    'python3',
    [
      '-c',
      'import torch,time; a=torch.randn(4096,4096,device="cuda",dtype=torch.bfloat16); torch.mm(a,a); torch.cuda.synchronize(); print("busy",flush=True)\nt=time.time()\nwhile time.time()-t<60:\n  torch.mm(a,a); torch.cuda.synchronize()',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  ),
);
await Promise.all(holders.map((h) => new Promise((r) => h.stdout.once('data', r))));
await new Promise((r) => setTimeout(r, 1500));
function time(name, fn, n = 2000) {
  fn();
  const c = process.cpuUsage();
  const t = process.hrtime.bigint();
  for (let i = 0; i < n; i++) fn();
  const wall = Number(process.hrtime.bigint() - t) / 1e6 / n;
  const u = process.cpuUsage(c);
  console.log(
    JSON.stringify({
      call: name,
      wallMs: Math.round(wall * 1000) / 1000,
      cpuMs: Math.round((u.user + u.system) / n) / 1000,
    }),
  );
}
console.log('listed', nvml.processes(0).length);
time('processes (compute + graphics)', () => nvml.processes(0));
time('memory (nvmlDeviceGetMemoryInfo)', () => nvml.memory(0));
const handle = nvml.handle(0);
time('compute list only', () => nvml.readProcesses('computeProcesses', 'c', handle));
time('graphics list only', () => nvml.readProcesses('graphicsProcesses', 'g', handle));
// As the fence polls: everything since the last stamp seen a second ago, and since the start.
const recent = nvml.processUtilization(0, Date.now() * 1000 - 1_000_000) ?? [];
console.log(
  'utilization samples in the last second',
  recent.length,
  JSON.stringify(recent.slice(0, 3)),
);
time(
  'process utilization, last second',
  () => nvml.processUtilization(0, Date.now() * 1000 - 1_000_000),
  500,
);
time('process utilization, nothing new', () => nvml.processUtilization(0, Date.now() * 1000), 500);
for (const h of holders) h.kill('SIGKILL');
nvml.close();

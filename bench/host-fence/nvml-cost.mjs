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
await Promise.all(holders.map((h) => new Promise((r) => h.stdout.once('data', r))));
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
for (const h of holders) h.kill('SIGKILL');
nvml.close();

#!/usr/bin/env node
// The agent's own refusal of a suspend on a real GPU (issue #30, point 4): ipc_region.py's
// exporter and importer (PyTorch sharing a CUDA tensor between processes, under libvgpu.so) run
// as one shard's container would, in a cgroup of their own named by a 64-hex container id, with
// the shard's region where the agent keeps it; at each of ipc_region.py's steps this script asks
// the agent's refuseIpcImporters (RegionsService reading the region, ContainerMemory finding the
// container's live processes in /proc, the same call MemoryService makes before it locks
// anything) whether the shard may be suspended.
//
//   node ipc_agent.mjs --lib libvgpu.so [--mib 256]          (root: it makes a cgroup)
//
// ipc_region.py prints one JSON line per step with the agent's answer beside the region's bits;
// its last line says whether every step was as expected. Nothing is checkpointed.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const agentDist = process.env.GPUSHARDS_AGENT_DIST ?? join(here, '../../apps/agent/dist');
const { values, positionals } = parseArgs({
  options: { lib: { type: 'string' }, mib: { type: 'string', default: '256' } },
  allowPositionals: true,
});

const { RegionsService } = await import(join(agentDist, 'regions/regions.service.js'));
const { ContainerMemory } = await import(join(agentDist, 'memory/container-memory.js'));
const { refuseIpcImporters } = await import(join(agentDist, 'memory/ipc-imports.js'));
const { openCheckpointApi } = await import(join(agentDist, 'memory/checkpoint-driver.js'));
const { createLogger } = await import(join(agentDist, 'logging/logger.js'));

const SHARD = 'ipc-probe';

/** `check REGION_ROOT CONTAINER_ID`: the agent's answer, one JSON line (ipc_region.py's hook). */
async function check(regionRoot, containerId) {
  const logger = createLogger('silent', 'ipc-probe');
  const regions = new RegionsService({ regionRoot }, {}, logger);
  const containers = new ContainerMemory('/proc', openCheckpointApi('libcuda.so.1'), () => ({}));
  try {
    await refuseIpcImporters(regions, containers, logger, SHARD, containerId);
    console.log(JSON.stringify({ agent: 'suspendable', processes: containers.namespaced(containerId).length }));
  } catch (error) {
    if (error?.name !== 'NotSuspendableError') throw error;
    console.log(JSON.stringify({ agent: 'refused', reason: error.message }));
  }
}

async function run() {
  if (values.lib === undefined) throw new Error('usage: node ipc_agent.mjs --lib libvgpu.so [--mib 256]');
  const work = mkdtempSync(join(tmpdir(), 'gpushards-ipc-agent-'));
  const regionRoot = join(work, 'regions');
  mkdirSync(join(regionRoot, SHARD), { recursive: true });
  const containerId = randomBytes(32).toString('hex');
  const cgroup = join('/sys/fs/cgroup/gpushards-ipc-probe', containerId);
  mkdirSync(cgroup, { recursive: true });
  const hook = `${process.execPath} ${fileURLToPath(import.meta.url)} check ${regionRoot} ${containerId}`;
  try {
    const child = spawn('python3', [join(here, 'ipc_region.py'), '--exporter', values.mib], {
      env: {
        ...process.env,
        LD_PRELOAD: resolve(values.lib),
        GPUSHARDS_REGION_PATH: join(regionRoot, SHARD, 'region'),
        CUDA_DEVICE_MEMORY_LIMIT: '16g',
        IPC_REGION_HOOK: hook,
      },
      stdio: 'inherit',
    });
    // Into the container's cgroup before it starts CUDA or its importer (which inherits it).
    writeFileSync(join(cgroup, 'cgroup.procs'), String(child.pid));
    const code = await new Promise((done) => child.on('exit', (status) => done(status ?? 1)));
    process.exitCode = code;
  } finally {
    try {
      writeFileSync(join(cgroup, 'cgroup.kill'), '1');
    } catch {}
    for (let i = 0; i < 50; i++) {
      try {
        rmdirSync(cgroup);
        break;
      } catch {
        await new Promise((wait) => setTimeout(wait, 100));
      }
    }
  }
}

if (positionals[0] === 'check') await check(positionals[1], positionals[2]);
else await run();

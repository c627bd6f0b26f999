import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { observedMemoryOf, type CheckpointProcess, type ObservedMemory } from '@gpushards/limits';

import { namespacedProcess } from '../compute/process-launches.js';
import { containerIdFromCgroup } from '../enforcement/process-owners.js';
import type { MemoryMark } from '../limits/limits-file.js';
import type { CheckpointApi } from './checkpoint-driver.js';
import type { ContainerProcess } from './ipc-imports.js';

/**
 * Every process of each of these containers, by host PID: one pass over /proc reading each
 * process's cgroup (the host fence's mapping, process-owners.ts). Every process, not only those
 * NVML lists: a process can hold GPU memory the driver's listing leaves out, and a checkpoint
 * that skips one of a container's CUDA processes would leave the others waiting on it.
 * Processes that end during the pass are skipped.
 */
export function containerPids(
  procRoot: string,
  containerIds: ReadonlySet<string>,
): Map<string, number[]> {
  const found = new Map<string, number[]>();
  if (containerIds.size === 0) return found;
  for (const entry of readdirSync(procRoot)) {
    if (!/^\d+$/.test(entry)) continue;
    let cgroup: string;
    try {
      cgroup = readFileSync(join(procRoot, entry, 'cgroup'), 'utf8');
    } catch {
      continue; // gone
    }
    const containerId = containerIdFromCgroup(cgroup);
    if (containerId === undefined || !containerIds.has(containerId)) continue;
    const pids = found.get(containerId) ?? [];
    pids.push(Number(entry));
    found.set(containerId, pids);
  }
  return found;
}

/**
 * A zombie (or a process being reaped): it has exited and the driver let go of its GPU state,
 * though its PID stays until its parent reaps it (a container's PID 1 that never does).
 */
function exited(procRoot: string, hostPid: number): boolean {
  try {
    return /^State:\s*[ZX]/m.test(readFileSync(join(procRoot, String(hostPid), 'status'), 'utf8'));
  } catch {
    return true; // gone
  }
}

/** The processes among `pids` the driver knows (its GetState answers), with their states. */
export async function cudaProcesses(
  api: CheckpointApi,
  pids: readonly number[],
): Promise<CheckpointProcess[]> {
  const states = await Promise.all(pids.map((pid) => api.state(pid)));
  return pids.flatMap((pid, i) => {
    const state = states[i];
    return state === undefined ? [] : [{ pid, state }];
  });
}

/** A running shard container, as the memory module reads it. */
export interface RunningContainer {
  readonly shardId: string;
  readonly containerId: string;
}

/**
 * Where running containers' GPU memory is: their CUDA processes' states (the driver) and their
 * limits files' memory_state (libs/limits observedMemoryOf).
 */
export class ContainerMemory {
  constructor(
    private readonly procRoot: string,
    private readonly api: CheckpointApi,
    private readonly marked: (shardId: string) => Promise<MemoryMark>,
  ) {}

  /**
   * Every live process of one container (CUDA or not) with its PID in the container's namespace
   * and its start time: what a region's slots are matched against.
   */
  namespaced(containerId: string): ContainerProcess[] {
    const pids = containerPids(this.procRoot, new Set([containerId])).get(containerId) ?? [];
    return pids.flatMap((hostPid) => {
      const process = namespacedProcess(this.procRoot, hostPid);
      if (process === undefined || exited(this.procRoot, hostPid)) return [];
      return [{ hostPid, ...process }];
    });
  }

  /** The CUDA processes of one container as they are now. */
  async processes(containerId: string): Promise<CheckpointProcess[]> {
    const pids = containerPids(this.procRoot, new Set([containerId])).get(containerId) ?? [];
    return cudaProcesses(this.api, pids);
  }

  async observe(container: RunningContainer): Promise<ObservedMemory> {
    return (await this.inspect(container)).memory;
  }

  /** Its CUDA processes and where their memory is. */
  async inspect(
    container: RunningContainer,
  ): Promise<{ processes: CheckpointProcess[]; memory: ObservedMemory }> {
    const processes = await this.processes(container.containerId);
    const memory = observedMemoryOf(
      processes.map((p) => p.state),
      await this.marked(container.shardId),
    );
    return { processes, memory };
  }

  /** Every container's, from one pass over /proc; an error for one does not stop the others. */
  async observeAll(
    containers: readonly RunningContainer[],
  ): Promise<Map<string, ObservedMemory | Error>> {
    const pids = containerPids(this.procRoot, new Set(containers.map((c) => c.containerId)));
    const seen = new Map<string, ObservedMemory | Error>();
    await Promise.all(
      containers.map(async (container) => {
        try {
          const processes = await cudaProcesses(this.api, pids.get(container.containerId) ?? []);
          const memory = observedMemoryOf(
            processes.map((p) => p.state),
            await this.marked(container.shardId),
          );
          seen.set(container.shardId, memory);
        } catch (error) {
          seen.set(container.shardId, error instanceof Error ? error : new Error(String(error)));
        }
      }),
    );
    return seen;
  }
}

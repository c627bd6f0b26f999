import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The container a process runs in, from its cgroup: Docker puts each container in a cgroup
 * named after its 64-hex id, under either cgroup driver and either cgroup version
 * ("/docker/<id>", "/system.slice/docker-<id>.scope", containerd's "cri-containerd-<id>.scope").
 * A process cannot leave its cgroup without privileges a shard does not have.
 */
export function containerIdFromCgroup(text: string): string | undefined {
  for (const line of text.split('\n')) {
    // hierarchy-id:controllers:path; the path is what follows the second colon.
    const path = line.slice(line.indexOf(':', line.indexOf(':') + 1) + 1);
    const ids = path.match(/(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])/g);
    if (ids !== null) return ids[ids.length - 1];
  }
  return undefined;
}

/**
 * PID → container id, read from /proc/<pid>/cgroup once per process and cached while the
 * process holds GPU memory (a PID that leaves NVML's lists is forgotten at the next sample,
 * so a reused PID is read afresh).
 */
export class ProcessOwners {
  private readonly cache = new Map<number, string | null>();
  private seen = new Set<number>();
  /** /proc reads, for the benchmark. */
  reads = 0;

  constructor(private readonly procRoot = '/proc') {}

  /** The container of `pid`; null for a host process or one that is gone. */
  containerOf(pid: number): string | null {
    this.seen.add(pid);
    const cached = this.cache.get(pid);
    if (cached !== undefined) return cached;
    let owner: string | null;
    try {
      this.reads++;
      owner =
        containerIdFromCgroup(readFileSync(join(this.procRoot, String(pid), 'cgroup'), 'utf8')) ??
        null;
    } catch {
      owner = null; // gone already: its memory is being freed
    }
    this.cache.set(pid, owner);
    return owner;
  }

  /** The command name of a process (/proc/<pid>/comm), for the host allow-list. */
  commandOf(pid: number): string | undefined {
    try {
      return readFileSync(join(this.procRoot, String(pid), 'comm'), 'utf8').trim();
    } catch {
      return undefined;
    }
  }

  /** Ends one sample: forgets the PIDs it did not see. */
  endSample(): void {
    for (const pid of this.cache.keys()) if (!this.seen.has(pid)) this.cache.delete(pid);
    this.seen = new Set();
  }
}

/**
 * The host's fence: what the agent does when a shard's real GPU memory (NVML's per-process
 * numbers, out of the tenant's reach) passes its cap. Pure: the agent samples, maps processes
 * to shards, calls enforcementActions, and applies what comes back.
 */

/** What happens to a shard whose real usage passes its cap plus the tolerance. */
export const CAP_POLICIES = ['kill', 'stop', 'report'] as const;
export type CapPolicy = (typeof CAP_POLICIES)[number];
/** Kill, as the kernel's OOM killer would: the processes holding the most go first. */
export const DEFAULT_CAP_POLICY: CapPolicy = 'kill';

/**
 * Real usage may pass the cap by this much before anything happens: lazily loaded kernels
 * and context growth the interposer cannot see took PyTorch 12-138 MiB past its cap on the
 * H100 (issue 11), and the correction (the agent writes real usage into the limits file)
 * turns that growth into clean out-of-memory errors instead.
 */
export const DEFAULT_CAP_TOLERANCE_BYTES = 160 * 1024 * 1024;

export function isCapPolicy(value: unknown): value is CapPolicy {
  return typeof value === 'string' && (CAP_POLICIES as readonly string[]).includes(value);
}

/** One process's real memory on one GPU, as NVML reports it. */
export interface ProcessUsage {
  readonly pid: number;
  readonly gpuUuid: string;
  readonly bytes: number;
  /** The shard the process belongs to (through its cgroup); undefined for none. */
  readonly shardId?: string;
}

/** A shard's caps and the policy it runs under. */
export interface ShardCaps {
  readonly shardId: string;
  readonly policy: CapPolicy;
  /**
   * GPU UUID → cap in bytes (context included). A GPU the shard has no cap for is one it was
   * not given: any memory there is past a cap of 0. A cap of 0 here means uncapped.
   */
  readonly capBytes: ReadonlyMap<string, number>;
}

export interface EnforcementOptions {
  readonly toleranceBytes: number;
  /**
   * Processes already killed whose memory NVML still shows (the driver frees it a moment
   * later): counted as gone, so they are not chosen twice and do not make others die.
   */
  readonly dying?: ReadonlySet<number>;
}

/** What a shard holds on one GPU. */
export interface ShardGpuUsage {
  readonly shardId: string;
  readonly gpuUuid: string;
  readonly realBytes: number;
  /** Its largest process there: pid and bytes. */
  readonly top: { readonly pid: number; readonly bytes: number };
}

/** One shard past its cap on one GPU, and what to do about it. */
export interface CapViolation {
  readonly shardId: string;
  readonly gpuUuid: string;
  readonly realBytes: number;
  readonly capBytes: number;
  readonly toleranceBytes: number;
  readonly action: CapPolicy;
  /** The process holding the most on that GPU. */
  readonly process: { readonly pid: number; readonly bytes: number };
  /**
   * kill: the processes to SIGKILL on this GPU, largest first (a process chosen for an earlier
   * GPU of the same shard is not listed again); stop: every process of the shard seen on any
   * GPU; report: none.
   */
  readonly pids: readonly number[];
}

export interface EnforcementDecision {
  /** Real bytes per shard per GPU where the shard holds anything (dying processes left out). */
  readonly usage: readonly ShardGpuUsage[];
  readonly violations: readonly CapViolation[];
  /** Memory held by processes of no shard, per GPU (the caller leaves out its allow-list). */
  readonly unattributed: readonly {
    readonly gpuUuid: string;
    readonly bytes: number;
    readonly pids: readonly number[];
  }[];
}

/**
 * Sums each shard's real usage per GPU and decides, for each shard past cap + tolerance on a
 * GPU, its policy's action. For `kill`, processes of the shard holding memory on that GPU are
 * chosen largest first (pid breaks ties) until what remains there is at or under the cap; what
 * a chosen process holds on the shard's other GPUs counts as freed there too.
 */
export function enforcementActions(
  samples: readonly ProcessUsage[],
  shards: readonly ShardCaps[],
  options: EnforcementOptions,
): EnforcementDecision {
  if (!Number.isSafeInteger(options.toleranceBytes) || options.toleranceBytes < 0) {
    throw new RangeError(
      `toleranceBytes must be a whole number of bytes, got ${options.toleranceBytes}`,
    );
  }
  const dying = options.dying ?? new Set<number>();
  const capsOf = new Map(shards.map((shard) => [shard.shardId, shard]));
  // shard → GPU → pid → bytes (a pid listed twice for one GPU counts once, at its largest).
  const held = new Map<string, Map<string, Map<number, number>>>();
  const foreign = new Map<string, Map<number, number>>();
  for (const sample of samples) {
    if (dying.has(sample.pid) || sample.bytes <= 0) continue;
    if (sample.shardId === undefined || !capsOf.has(sample.shardId)) {
      const gpu = getOrSet(foreign, sample.gpuUuid, () => new Map<number, number>());
      gpu.set(sample.pid, Math.max(gpu.get(sample.pid) ?? 0, sample.bytes));
      continue;
    }
    const gpus = getOrSet(held, sample.shardId, () => new Map<string, Map<number, number>>());
    const pids = getOrSet(gpus, sample.gpuUuid, () => new Map<number, number>());
    pids.set(sample.pid, Math.max(pids.get(sample.pid) ?? 0, sample.bytes));
  }

  const usage: ShardGpuUsage[] = [];
  const violations: CapViolation[] = [];
  for (const shardId of [...held.keys()].sort()) {
    const shard = capsOf.get(shardId)!;
    const gpus = held.get(shardId)!;
    const killed = new Set<number>();
    for (const gpuUuid of [...gpus.keys()].sort()) {
      const processes = [...gpus.get(gpuUuid)!].sort(([pa, a], [pb, b]) => b - a || pa - pb);
      const realBytes = processes.reduce((sum, [, bytes]) => sum + bytes, 0);
      const [topPid, topBytes] = processes[0]!;
      usage.push({ shardId, gpuUuid, realBytes, top: { pid: topPid, bytes: topBytes } });
      const cap = shard.capBytes.get(gpuUuid);
      if (cap === 0) continue; // uncapped
      const capBytes = cap ?? 0;
      if (realBytes <= capBytes + options.toleranceBytes) continue;
      let pids: number[] = [];
      if (shard.policy === 'kill') {
        let remaining = processes
          .filter(([pid]) => killed.has(pid))
          .reduce((rest, [, bytes]) => rest - bytes, realBytes);
        for (const [pid, bytes] of processes) {
          if (remaining <= capBytes) break;
          if (killed.has(pid)) continue;
          killed.add(pid);
          pids.push(pid);
          remaining -= bytes;
        }
        // An earlier GPU's victims already brought this one back under.
        if (pids.length === 0 && remaining <= capBytes) continue;
      } else if (shard.policy === 'stop') {
        pids = [...new Set([...gpus.values()].flatMap((byPid) => [...byPid.keys()]))].sort(
          (a, b) => a - b,
        );
      }
      violations.push({
        shardId,
        gpuUuid,
        realBytes,
        capBytes,
        toleranceBytes: options.toleranceBytes,
        action: shard.policy,
        process: { pid: topPid, bytes: topBytes },
        pids,
      });
    }
  }
  const unattributed = [...foreign.keys()].sort().map((gpuUuid) => {
    const pids = foreign.get(gpuUuid)!;
    return {
      gpuUuid,
      bytes: [...pids.values()].reduce((sum, bytes) => sum + bytes, 0),
      pids: [...pids.keys()].sort((a, b) => a - b),
    };
  });
  return { usage, violations, unattributed };
}

function getOrSet<K, V>(map: Map<K, V>, key: K, create: () => V): V {
  let value = map.get(key);
  if (value === undefined) {
    value = create();
    map.set(key, value);
  }
  return value;
}

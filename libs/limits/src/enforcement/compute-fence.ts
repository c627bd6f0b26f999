/**
 * The compute fence: GPU work that no turn governs. libvgpu.so stamps every launch it admits in
 * the shard's own region (`last_launch_ns` of the GPU's entry, CLOCK_MONOTONIC), a file only
 * that shard's container writes; a process that reaches the driver past it (its own `dlmopen`
 * of libcuda, a static runtime) runs kernels that stamp nothing. NVML's per-process
 * utilization sees both, out of the tenant's reach. A shard whose processes keep a GPU busy
 * while its region records no launch there runs ungoverned GPU work. Pure: the agent samples
 * NVML over a window, maps processes to shards, reads their regions, calls ungovernedCompute
 * and applies what comes back under the shard's cap policy (the same policies as the memory
 * fence: enforcement.ts).
 */
import type { CapPolicy } from './enforcement.js';

/** How long one window is (the agent's GPUSHARDS_COMPUTE_FENCE_SECONDS). */
export const DEFAULT_COMPUTE_FENCE_WINDOW_SECONDS = 5;
/** A sample at or above this smUtil (percent) is a busy sample. */
export const DEFAULT_UNGOVERNED_THRESHOLD_PERCENT = 10;
/** Busy samples a shard needs in one window to be suspected. */
export const DEFAULT_UNGOVERNED_MIN_SAMPLES = 2;

/** One NVML utilization sample of one process on one GPU, taken within the window. */
export interface ProcessUtilization {
  readonly pid: number;
  readonly gpuUuid: string;
  /** smUtil: percent of the sample's period that a kernel of the process ran. */
  readonly smPercent: number;
  /** The shard the process belongs to (through its cgroup); undefined for none. */
  readonly shardId?: string;
}

/** A shard's last launch through libvgpu.so on one GPU, read from its region at the window's end. */
export interface LaunchStamp {
  readonly shardId: string;
  readonly gpuUuid: string;
  /** CLOCK_MONOTONIC ns of its last admitted launch; 0n = it never launched. */
  readonly lastKernelNs: bigint;
}

/** The window the samples cover, on CLOCK_MONOTONIC (ns), as the launch stamps are. */
export interface ComputeWindow {
  readonly startNs: bigint;
  readonly endNs: bigint;
}

/** A shard the fence may act on, and its policy (the memory fence's cap policy). */
export interface ComputeFenceShard {
  readonly shardId: string;
  readonly policy: CapPolicy;
}

export interface ComputeFenceOptions {
  /** Default DEFAULT_UNGOVERNED_THRESHOLD_PERCENT; more than 0, at most 100. */
  readonly thresholdPercent?: number;
  /** Default DEFAULT_UNGOVERNED_MIN_SAMPLES; a whole number, at least 1. */
  readonly minSamples?: number;
  /** Processes already killed: never chosen again (their last samples may still come). */
  readonly dying?: ReadonlySet<number>;
  /**
   * Each process's own last launch through libvgpu.so (CLOCK_MONOTONIC ns, from its slot in its
   * shard's region), by the host PID NVML gives: null for a process with no slot there (it
   * never went through libvgpu.so). A process not in the map is not judged on its own. With
   * it, a process that keeps a GPU busy without launching through libvgpu.so is found even
   * while a sibling in its shard launches through it.
   */
  readonly processLaunches?: ReadonlyMap<number, bigint | null>;
}

/** A shard and GPU that looked ungoverned in one window. */
export interface UngovernedSuspect {
  readonly shardId: string;
  readonly gpuUuid: string;
}

/** One process of a finding whose samples passed the threshold. */
export interface UngovernedProcess {
  readonly pid: number;
  /** The mean smUtil of its samples in the window. */
  readonly smPercent: number;
  readonly samples: number;
}

/** A shard that ran ungoverned GPU work on one GPU in two consecutive windows. */
export interface UngovernedFinding {
  readonly shardId: string;
  readonly gpuUuid: string;
  readonly action: CapPolicy;
  /** The mean smUtil of each of its processes there, summed, at most 100. */
  readonly busyPercent: number;
  /** Samples of its processes there in the window, and how many passed the threshold. */
  readonly samples: number;
  readonly busySamples: number;
  readonly thresholdPercent: number;
  readonly windowSeconds: number;
  /** Its last launch through libvgpu.so there (before the window); absent when it has none. */
  readonly lastKernelNs?: bigint;
  /** Its processes with a sample at or above the threshold, busiest first (pid breaks ties). */
  readonly processes: readonly UngovernedProcess[];
  /** kill: those processes, less any already dying; stop and report: none. */
  readonly pids: readonly number[];
  /** It was a finding in the previous window too (the same episode). */
  readonly repeated: boolean;
  /**
   * Whether to act now: kill whenever there is a process left to kill; stop and report once
   * per episode (a finding that is not repeated).
   */
  readonly act: boolean;
}

export interface ComputeFenceDecision {
  /** What looked ungoverned in this window: the next window's `previous`. */
  readonly suspects: readonly UngovernedSuspect[];
  /** Suspects of this window that were suspects of the previous one too. */
  readonly findings: readonly UngovernedFinding[];
}

/**
 * Decides, for one window, which shards ran ungoverned GPU work. A shard is a suspect on a GPU
 * when at least `minSamples` samples of its processes there reached `thresholdPercent` while
 * its launch stamps there record no launch in the window (none, or its last launch before
 * the window's start); or, where it did launch there, when that many samples of its processes
 * whose own slots record no launch in the window (`processLaunches`) did. A suspect of this window that was one in the previous window
 * (`previous`, the decision of the window just before; undefined when there was none) is a
 * finding: one window alone never is, so a shard whose last governed kernels, launched just
 * before a window began, still ran in it is not taken for a bypass.
 */
export function ungovernedCompute(
  samples: readonly ProcessUtilization[],
  launchStamps: readonly LaunchStamp[],
  shards: readonly ComputeFenceShard[],
  window: ComputeWindow,
  previous: ComputeFenceDecision | undefined,
  options: ComputeFenceOptions = {},
): ComputeFenceDecision {
  const threshold = options.thresholdPercent ?? DEFAULT_UNGOVERNED_THRESHOLD_PERCENT;
  if (!Number.isFinite(threshold) || threshold <= 0 || threshold > 100) {
    throw new RangeError(`thresholdPercent must be more than 0 and at most 100, got ${threshold}`);
  }
  const minSamples = options.minSamples ?? DEFAULT_UNGOVERNED_MIN_SAMPLES;
  if (!Number.isSafeInteger(minSamples) || minSamples < 1) {
    throw new RangeError(`minSamples must be a whole number of at least 1, got ${minSamples}`);
  }
  if (window.endNs <= window.startNs) {
    throw new RangeError(
      `the window must end after it starts (${window.startNs}..${window.endNs})`,
    );
  }
  const dying = options.dying ?? new Set<number>();
  const policyOf = new Map(shards.map((shard) => [shard.shardId, shard.policy]));
  // shard|GPU → pid → its samples' count, sum and busy count.
  const busy = new Map<string, Map<number, { count: number; sum: number; busy: number }>>();
  for (const sample of samples) {
    if (sample.shardId === undefined || !policyOf.has(sample.shardId)) continue;
    if (!Number.isFinite(sample.smPercent)) continue;
    const key = keyOf(sample.shardId, sample.gpuUuid);
    const pids = busy.get(key) ?? new Map<number, { count: number; sum: number; busy: number }>();
    busy.set(key, pids);
    const pid = pids.get(sample.pid) ?? { count: 0, sum: 0, busy: 0 };
    pids.set(sample.pid, pid);
    const sm = Math.min(100, Math.max(0, sample.smPercent));
    pid.count++;
    pid.sum += sm;
    if (sm >= threshold) pid.busy++;
  }
  const launches = new Map(launchStamps.map((m) => [keyOf(m.shardId, m.gpuUuid), m.lastKernelNs]));
  const processLaunches = options.processLaunches ?? new Map<number, bigint | null>();
  /** Launched through libvgpu.so in the window, as far as its own slot tells. */
  const processGoverned = (pid: number) => {
    const last = processLaunches.get(pid);
    return last === undefined || (last !== null && last >= window.startNs);
  };
  const wasSuspect = new Set(previous?.suspects.map((s) => keyOf(s.shardId, s.gpuUuid)) ?? []);
  const wasFinding = new Set(previous?.findings.map((f) => keyOf(f.shardId, f.gpuUuid)) ?? []);
  const windowSeconds = Number(window.endNs - window.startNs) / 1e9;

  const suspects: UngovernedSuspect[] = [];
  const findings: UngovernedFinding[] = [];
  for (const key of [...busy.keys()].sort()) {
    const [shardId = '', gpuUuid = ''] = key.split('\u0000');
    const lastKernelNs = launches.get(key);
    const shardGoverned = lastKernelNs !== undefined && lastKernelNs >= window.startNs;
    // A shard that launched here through libvgpu.so is judged process by process: only those
    // whose own slot shows no launch in the window can be ungoverned.
    const pids = new Map(
      [...busy.get(key)!].filter(([pid]) => !shardGoverned || !processGoverned(pid)),
    );
    let samplesSeen = 0;
    let busySamples = 0;
    let busyPercent = 0;
    for (const pid of pids.values()) {
      samplesSeen += pid.count;
      busySamples += pid.busy;
      busyPercent += pid.sum / pid.count;
    }
    if (busySamples < minSamples) continue;
    suspects.push({ shardId, gpuUuid });
    if (!wasSuspect.has(key)) continue;
    const processes = [...pids]
      .filter(([, pid]) => pid.busy > 0)
      .map(([pid, s]) => ({ pid, smPercent: s.sum / s.count, samples: s.count }))
      .sort((a, b) => b.smPercent - a.smPercent || a.pid - b.pid);
    const action = policyOf.get(shardId)!;
    const victims =
      action === 'kill' ? processes.map((p) => p.pid).filter((pid) => !dying.has(pid)) : [];
    const repeated = wasFinding.has(key);
    findings.push({
      shardId,
      gpuUuid,
      action,
      busyPercent: Math.min(100, busyPercent),
      samples: samplesSeen,
      busySamples,
      thresholdPercent: threshold,
      windowSeconds,
      ...(lastKernelNs !== undefined ? { lastKernelNs } : {}),
      processes,
      pids: victims,
      repeated,
      act: action === 'kill' ? victims.length > 0 : !repeated,
    });
  }
  return { suspects, findings };
}

/**
 * The sentence people read (the API's event, the CLI): "ungoverned GPU work: pid N ran kernels
 * outside the compute ledger (smUtil X % over 5 s)".
 */
export function ungovernedComputeMessage(
  pid: number,
  smPercent: number,
  windowSeconds: number,
): string {
  const seconds = Math.round(windowSeconds * 10) / 10;
  return `ungoverned GPU work: pid ${pid} ran kernels outside the compute ledger (smUtil ${Math.round(smPercent)} % over ${seconds} s)`;
}

function keyOf(shardId: string, gpuUuid: string): string {
  return `${shardId}\u0000${gpuUuid}`;
}

/**
 * Pressure episodes (issue #31): a shard's allocation was refused although its budget allowed
 * it, libvgpu.so rang the region's pressure bell, and the fence sampled that GPU at once. An
 * episode ends when the memory of the processes the fence acted on there is gone (the relief:
 * from the ring to NVML no longer listing them), or, when the fence found nothing past a cap
 * there within NOTHING_FOUND_MS, unrelieved: the shortage is memory the fence does not judge
 * (a process of no shard), which placement leaves out of what it promises.
 */

/** An episode in which the fence acted nowhere on the GPU ends unrelieved after this. */
export const NOTHING_FOUND_MS = 2000;
/** One whose offenders are still listed this long after the ring ends unrelieved too. */
export const OFFENDERS_GONE_MS = 10_000;
/** How far back a ring's stamp (the tenant's word) is believed. */
const BELIEVED_NS = 5_000_000_000n;

export interface SettledPressure {
  readonly shardId: string;
  readonly gpuUuid: string;
  /** Wall-clock milliseconds of the ring. */
  readonly atMs: number;
  readonly reliefSeconds?: number;
  readonly killedPids: readonly number[];
}

interface Episode {
  readonly shardId: string;
  readonly gpuUuid: string;
  readonly atNs: bigint;
  readonly atMs: number;
  /** The processes the fence acted on there after the ring; empty: none yet. */
  readonly offenders: Set<number>;
  readonly killed: number[];
}

/** One open episode per GPU: rings on a GPU already under pressure join it. */
export class PressureReliefs {
  private readonly open = new Map<string, Episode>();

  /** A ring at `atNs` (CLOCK_MONOTONIC, the tenant's stamp); true when it opened an episode. */
  ring(shardId: string, gpuUuid: string, atNs: bigint, nowNs: bigint): boolean {
    if (this.open.has(gpuUuid)) return false;
    const believed = atNs > nowNs || nowNs - atNs > BELIEVED_NS ? nowNs : atNs;
    this.open.set(gpuUuid, {
      shardId,
      gpuUuid,
      atNs: believed,
      atMs: Date.now() - Number(nowNs - believed) / 1e6,
      offenders: new Set(),
      killed: [],
    });
    return true;
  }

  /** The fence acted on `pids` of a GPU (killed: those actually signalled). */
  acted(gpuUuid: string, pids: readonly number[], killed: readonly number[]): void {
    const episode = this.open.get(gpuUuid);
    if (episode === undefined) return;
    for (const pid of pids) episode.offenders.add(pid);
    episode.killed.push(...killed);
  }

  get any(): boolean {
    return this.open.size > 0;
  }

  /** An episode waits for the memory of processes the fence acted on to be freed. */
  get awaitingRelief(): boolean {
    return [...this.open.values()].some((episode) => episode.offenders.size > 0);
  }

  /** Ends the episodes this sample settles: `listed(gpu, pid)` is what NVML lists now. */
  settle(listed: (gpuUuid: string, pid: number) => boolean, nowNs: bigint): SettledPressure[] {
    const settled: SettledPressure[] = [];
    for (const [gpuUuid, episode] of this.open) {
      const ageMs = Number(nowNs - episode.atNs) / 1e6;
      const base = {
        shardId: episode.shardId,
        gpuUuid,
        atMs: episode.atMs,
        killedPids: episode.killed,
      };
      if (episode.offenders.size === 0) {
        if (ageMs < NOTHING_FOUND_MS) continue;
        settled.push(base);
      } else if (![...episode.offenders].some((pid) => listed(gpuUuid, pid))) {
        settled.push({ ...base, reliefSeconds: ageMs / 1000 });
      } else if (ageMs >= OFFENDERS_GONE_MS) {
        settled.push(base);
      } else {
        continue;
      }
      this.open.delete(gpuUuid);
    }
    return settled;
  }
}

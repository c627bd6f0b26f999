import { performance } from 'node:perf_hooks';

import type { PressureReliefMessage } from '@gpushards/protocol';

import type { Logger } from '../logging/logger.js';
import type { AgentMetrics } from '../metrics/agent-metrics.js';
import { PressureReliefs, type SettledPressure } from './pressure-reliefs.js';

/**
 * A pressure ring on a GPU makes the fence sample at once, but one GPU gets at most one such
 * sample per this many milliseconds, whatever its shards ring: the rest wait for it (coalesced).
 */
export const PRESSURE_SAMPLE_GAP_MS = 5;
/**
 * After the fence acted for a pressure ring, the GPU is sampled this often until the memory is
 * free (the relief's resolution), the regular interval notwithstanding. Only a process really
 * past its cap starts this: ringing alone does not.
 */
export const RELIEF_POLL_MS = 10;

/**
 * The host fence's side of pressure rings (issue #31; docs/agent.md, "The host fence"): each
 * ring is counted, opens an episode on its GPU (PressureReliefs) and asks for a sample of that
 * GPU at once, bounded per GPU by PRESSURE_SAMPLE_GAP_MS; the fence tells what it acted on
 * there and hands each sample's processes, which settle the episodes; the settled ones wait
 * here for the heartbeat.
 */
export class FencePressure {
  private readonly reliefs = new PressureReliefs();
  private readonly lastSample = new Map<string, number>();
  private readonly waiting = new Map<string, NodeJS.Timeout>();
  private settled: SettledPressure[] = [];

  constructor(
    private readonly metrics: AgentMetrics,
    private readonly logger: Logger,
    /** Samples the fence soon, that GPU listed afresh. */
    private readonly sample: (gpuUuid: string) => void,
  ) {}

  /** A ring from shard `shardId` on GPU `gpuUuid` (as this host registered it). */
  ring(shardId: string, gpuUuid: string, atNs: bigint): void {
    this.metrics.pressureSignals.inc({ gpu: gpuUuid });
    if (this.reliefs.ring(shardId, gpuUuid, atNs, process.hrtime.bigint())) {
      this.logger.info({ shardId, gpu: gpuUuid }, 'a shard was refused memory it was promised');
    }
    if (this.waiting.has(gpuUuid)) return;
    const wait =
      (this.lastSample.get(gpuUuid) ?? -Infinity) + PRESSURE_SAMPLE_GAP_MS - performance.now();
    const sample = () => {
      this.waiting.delete(gpuUuid);
      this.lastSample.set(gpuUuid, performance.now());
      this.metrics.pressureSamples.inc();
      this.sample(gpuUuid);
    };
    if (wait <= 0) sample();
    else this.waiting.set(gpuUuid, setTimeout(sample, wait));
  }

  /** The fence acted on `pids` of a GPU (killed: those actually signalled). */
  acted(gpuUuid: string, pids: readonly number[], killed: readonly number[]): void {
    this.reliefs.acted(gpuUuid, pids, killed);
  }

  /** An episode waits for the memory of processes the fence acted on to be freed. */
  get awaitingRelief(): boolean {
    return this.reliefs.awaitingRelief;
  }

  /** Settles the episodes a sample's processes end. */
  settle(processes: readonly { readonly gpuUuid: string; readonly pid: number }[]): void {
    if (!this.reliefs.any) return;
    const listed = new Set(processes.map((p) => `${p.gpuUuid}|${p.pid}`));
    const settled = this.reliefs.settle(
      (gpu, pid) => listed.has(`${gpu}|${pid}`),
      process.hrtime.bigint(),
    );
    for (const relief of settled) {
      const fields = {
        shardId: relief.shardId,
        gpu: relief.gpuUuid,
        killedPids: relief.killedPids,
      };
      if (relief.reliefSeconds !== undefined) {
        this.metrics.pressureRelief.observe({ gpu: relief.gpuUuid }, relief.reliefSeconds);
        this.logger.info(
          { ...fields, reliefSeconds: relief.reliefSeconds },
          'pressure relieved: the memory past a cap is free',
        );
      } else {
        this.logger.warn(
          fields,
          'pressure not relieved: the fence found nothing past a cap on the GPU (memory of no shard?)',
        );
      }
    }
    this.settled.push(...settled);
  }

  /** The episodes settled since the last call, as the heartbeat carries them. */
  take(): PressureReliefMessage[] {
    return this.settled.splice(0).map((relief) => ({
      shardId: relief.shardId,
      gpuUuid: relief.gpuUuid,
      at: new Date(relief.atMs).toISOString(),
      ...(relief.reliefSeconds !== undefined ? { reliefSeconds: relief.reliefSeconds } : {}),
      killedPids: relief.killedPids.slice(0, 4096),
    }));
  }

  close(): void {
    for (const timer of this.waiting.values()) clearTimeout(timer);
    this.waiting.clear();
  }
}

import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import {
  enforcementActions,
  type CapViolation,
  type EnforcementDecision,
  type ProcessUsage,
} from '@gpushards/limits';

import type { PressureReliefMessage } from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { GpusService } from '../gpus/gpus.service.js';
import { LimitsService, type ShardLimits } from '../limits/limits.service.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { AgentMetrics } from '../metrics/agent-metrics.js';
import { RegionWatchService } from '../regions/region-watch.service.js';
import { ShardsService } from '../shards/shards.service.js';
import { PolicyActions } from './policy-actions.js';
import { FencePressure, RELIEF_POLL_MS } from './fence-pressure.js';
import { ProcessOwners } from './process-owners.js';

/** What the agent did about one violation; goes to the control plane as a shard event. */
export interface ViolationRecord extends CapViolation {
  readonly teamId: string;
  readonly at: string;
  /** The processes actually signalled (kill), or whether the stop went through. */
  readonly killedPids: readonly number[];
  readonly error?: string;
}

/** The latest sample: real bytes per shard per GPU, and memory of no shard per GPU. */
export interface RealUsage {
  readonly sampledAt: number;
  readonly shards: ReadonlyMap<string, ReadonlyMap<string, number>>;
  readonly unattributed: ReadonlyMap<string, number>;
}

/**
 * A sample whose inputs (every GPU's process list with bytes, the shards, their caps and
 * policies) are those of the last full pass decides nothing new: it is cut short, except at
 * least this often, so that real_sampled_at_ms keeps being restamped (LimitsService).
 */
const FULL_PASS_MS = 1000;

/**
 * The host's fence. Every interval: each GPU's processes and their real memory from NVML,
 * each process's shard through its cgroup, the shard's real usage per GPU written into its
 * limits file (libvgpu.so budgets against it), and the shard's policy applied where real usage
 * passed cap + tolerance (enforcementActions in libs/limits decides).
 */
@Injectable()
export class EnforcementService implements OnModuleDestroy {
  private readonly logger: Logger;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  /** Kills and stops, and the PIDs killed until they are gone. */
  private readonly actions: PolicyActions;
  /** shardId|gpu pairs already reported under `report`, until they go back under. */
  private readonly reported = new Set<string>();
  private readonly listeners = new Set<(violations: readonly ViolationRecord[]) => void>();
  private latest: RealUsage | undefined;
  private warnedUnsupported = false;
  /** The inputs of the last full pass that found nothing to act on, and when it ran. */
  private quietKey: string | undefined;
  private quietAt = 0;
  /** Samples cut short because nothing changed, and full passes, for the benchmark. */
  readonly counts = { skipped: 0, full: 0 };
  /** A sample was asked for while one ran: another follows it at once. */
  private again = false;
  /** GPUs to list afresh at the next sample (a pressure ring on them). */
  private readonly fresh = new Set<string>();
  private readonly pressure: FencePressure;
  private reliefPoll: NodeJS.Timeout | undefined;
  /** GPUs with memory of no shard at the last sample (warned once per episode). */
  private readonly unattributedGpus = new Set<string>();

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly gpus: GpusService,
    private readonly shards: ShardsService,
    private readonly limits: LimitsService,
    /** Shared with the compute fence (ProcessOwnersModule). */
    private readonly owners: ProcessOwners,
    private readonly metrics: AgentMetrics,
    regionWatch: RegionWatchService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'enforcement' });
    this.actions = new PolicyActions(shards);
    this.pressure = new FencePressure(metrics, this.logger, (gpu) => {
      this.fresh.add(gpu);
      void this.sampleSoon();
    });
    regionWatch.onPressure((ring) => {
      if (this.config.enforcement.intervalMs === 0) return; // the fence is off
      const gpu = this.gpus.canonicalUuid(ring.gpuUuid);
      if (this.gpus.hostIndex(gpu) === undefined) return; // not a GPU of this host
      this.pressure.ring(ring.shardId, gpu, ring.atNs);
    });
  }

  /** Samples every `enforcement.intervalMs` until the module is destroyed. */
  start(): void {
    if (this.timer !== undefined || this.config.enforcement.intervalMs === 0) return;
    const tick = () => {
      void this.sampleSoon().finally(() => {
        if (this.timer !== undefined)
          this.timer = setTimeout(tick, this.config.enforcement.intervalMs);
      });
    };
    this.timer = setTimeout(tick, 0);
  }

  /**
   * Samples now, or right after the sample that runs (never two at once); resolves when a
   * sample that began after this call has ended.
   */
  private sampleSoon(): Promise<void> {
    if (this.running !== undefined) {
      this.again = true;
      return this.running.then(() => this.running);
    }
    const run = async (): Promise<void> => {
      do {
        this.again = false;
        await this.sampleNow().catch((error: unknown) =>
          this.logger.warn({ err: error }, 'GPU memory sample failed'),
        );
      } while (this.again);
    };
    this.running = run().finally(() => {
      this.running = undefined;
      if (this.pressure.awaitingRelief && this.reliefPoll === undefined) {
        this.reliefPoll = setTimeout(() => {
          this.reliefPoll = undefined;
          void this.sampleSoon();
        }, RELIEF_POLL_MS);
      }
    });
    return this.running;
  }

  /** Called with each batch of violations acted on (the heartbeat sends them at once). */
  onViolations(listener: (violations: readonly ViolationRecord[]) => void): void {
    this.listeners.add(listener);
  }

  /** Pressure episodes settled since the last call, for the heartbeat. */
  takePressureReliefs(): PressureReliefMessage[] {
    return this.pressure.take();
  }

  /** The last sample, for heartbeats; undefined before the first or where NVML cannot tell. */
  realUsage(): RealUsage | undefined {
    return this.latest;
  }

  /** One sample and what follows from it; resolves to what was done. */
  async sampleNow(): Promise<readonly ViolationRecord[]> {
    // Killed processes still listed: their GPUs are listed afresh until they are gone; so are
    // GPUs a shard rang the pressure bell for.
    const fresh = this.fresh.size > 0 ? new Set(this.fresh) : undefined;
    this.fresh.clear();
    const processes = this.gpus.processes(
      this.actions.anyDying ? this.actions.dyingPids() : undefined,
      fresh,
    );
    if (processes === undefined) {
      if (!this.warnedUnsupported) {
        this.warnedUnsupported = true;
        this.logger.warn(
          'this GPU library lists no processes: real usage is not sampled and caps are enforced by libvgpu.so alone',
        );
      }
      return [];
    }
    const now = Date.now();
    this.pressure.settle(processes);
    const records = this.shards.list();
    const shardLimits = this.limits.all();
    const key = sampleKey(processes, records, shardLimits);
    if (key === this.quietKey && !this.actions.anyDying && now - this.quietAt < FULL_PASS_MS) {
      this.counts.skipped++;
      return [];
    }
    this.counts.full++;
    const byContainer = new Map(
      records.flatMap((record) =>
        record.containerId !== undefined ? [[record.containerId, record] as const] : [],
      ),
    );
    const samples: ProcessUsage[] = processes.map((process) => {
      const containerId = this.owners.containerOf(process.pid);
      const shard = containerId === null ? undefined : byContainer.get(containerId);
      return {
        pid: process.pid,
        gpuUuid: process.gpuUuid,
        bytes: process.bytes,
        ...(shard !== undefined ? { shardId: shard.shardId } : {}),
      };
    });
    this.owners.endSample();
    this.actions.forgetGone(now, (pid) => processes.some((p) => p.pid === pid));
    const known = new Set(records.map((record) => record.shardId));
    const decision = enforcementActions(
      samples,
      shardLimits.filter((shard) => known.has(shard.shardId)),
      { toleranceBytes: this.config.enforcement.toleranceBytes, dying: this.actions.dyingPids() },
    );
    this.latest = this.realUsageOf(decision, samples, now);
    await this.writeReal(now);
    const done = await this.apply(decision, now);
    // Only a pass that found nothing over may let identical samples after it be cut short.
    this.quietKey = decision.violations.length === 0 ? key : undefined;
    this.quietAt = now;
    if (done.length > 0) for (const listener of this.listeners) listener(done);
    return done;
  }

  async onModuleDestroy(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.pressure.close();
    clearTimeout(this.reliefPoll);
    this.reliefPoll = undefined;
    await this.running;
  }

  private realUsageOf(
    decision: EnforcementDecision,
    samples: readonly ProcessUsage[],
    now: number,
  ): RealUsage {
    const shards = new Map<string, Map<string, number>>();
    for (const usage of decision.usage) {
      const gpus = shards.get(usage.shardId) ?? new Map<string, number>();
      gpus.set(usage.gpuUuid, usage.realBytes);
      shards.set(usage.shardId, gpus);
    }
    const allowed = new Set(this.config.enforcement.allowedProcesses);
    const unattributed = new Map<string, number>();
    for (const gpu of decision.unattributed) {
      let bytes = gpu.bytes;
      if (allowed.size > 0) {
        for (const pid of gpu.pids) {
          const command = this.owners.commandOf(pid);
          if (command !== undefined && allowed.has(command)) {
            // Only this process's share on this GPU leaves the count.
            bytes -= samples
              .filter((p) => p.pid === pid && p.gpuUuid === gpu.gpuUuid)
              .reduce((max, p) => Math.max(max, p.bytes), 0);
          }
        }
      }
      if (bytes > 0) unattributed.set(gpu.gpuUuid, bytes);
    }
    this.noteUnattributed(unattributed, decision.unattributed);
    return { sampledAt: now, shards, unattributed };
  }

  /**
   * Memory of no shard on a GPU (not on the allow-list) is memory placement cannot promise:
   * the control plane leaves it out of what the GPU offers (heartbeat unattributedBytesPerGpu).
   * A gauge per GPU, and a warning when it appears (an info when it is gone).
   */
  private noteUnattributed(
    unattributed: ReadonlyMap<string, number>,
    holders: EnforcementDecision['unattributed'],
  ): void {
    for (const gpu of this.gpus.inventory.gpus) {
      const bytes = unattributed.get(gpu.uuid) ?? 0;
      this.metrics.unattributedBytes.set({ gpu: gpu.uuid }, bytes);
      if (bytes > 0 && !this.unattributedGpus.has(gpu.uuid)) {
        this.unattributedGpus.add(gpu.uuid);
        const pids = holders.find((h) => h.gpuUuid === gpu.uuid)?.pids ?? [];
        this.logger.warn(
          {
            gpu: gpu.uuid,
            bytes,
            processes: pids
              .slice(0, 16)
              .map((pid) => ({ pid, command: this.owners.commandOf(pid) })),
          },
          'memory of no shard on a GPU: placement leaves it out (GPUSHARDS_GPU_ALLOWED_PROCESSES lists host processes expected there)',
        );
      } else if (bytes === 0 && this.unattributedGpus.delete(gpu.uuid)) {
        this.logger.info({ gpu: gpu.uuid }, 'no more memory of no shard on the GPU');
      }
    }
  }

  private async writeReal(now: number): Promise<void> {
    for (const record of this.shards.list()) {
      if (record.state !== 'RUNNING') continue;
      const real = this.latest?.shards.get(record.shardId) ?? new Map<string, number>();
      await this.limits
        .writeReal(record.shardId, real, now)
        .catch((error: unknown) =>
          this.logger.warn({ err: error, shardId: record.shardId }, 'cannot write real usage'),
        );
    }
  }

  private async apply(decision: EnforcementDecision, now: number): Promise<ViolationRecord[]> {
    const done: ViolationRecord[] = [];
    const over = new Set(decision.violations.map((v) => `${v.shardId}|${v.gpuUuid}`));
    for (const key of this.reported) if (!over.has(key)) this.reported.delete(key);
    this.actions.keepStopping(new Set(decision.violations.map((v) => v.shardId)));
    for (const violation of decision.violations) {
      const record = this.shards.list().find((r) => r.shardId === violation.shardId);
      if (record === undefined) continue;
      const base = { ...violation, teamId: record.teamId, at: new Date(now).toISOString() };
      if (violation.action === 'kill') {
        const outcome = this.actions.kill(violation.pids, now);
        this.pressure.acted(violation.gpuUuid, violation.pids, outcome.killedPids);
        done.push({ ...base, ...outcome });
      } else if (violation.action === 'stop') {
        // One stop per shard, whatever GPUs it passed its cap on, until its processes are gone.
        const outcome = await this.actions.stopOnce(violation.shardId);
        this.pressure.acted(violation.gpuUuid, violation.pids, []);
        if (outcome !== undefined) done.push({ ...base, ...outcome });
      } else {
        const key = `${violation.shardId}|${violation.gpuUuid}`;
        if (this.reported.has(key)) continue;
        this.reported.add(key);
        done.push({ ...base, killedPids: [] });
      }
    }
    for (const violation of done) {
      this.logger.warn(
        {
          shardId: violation.shardId,
          teamId: violation.teamId,
          gpu: violation.gpuUuid,
          realBytes: violation.realBytes,
          capBytes: violation.capBytes,
          action: violation.action,
          pids: violation.killedPids,
          ...(violation.error ? { error: violation.error } : {}),
        },
        'shard passed its GPU memory cap',
      );
    }
    return done;
  }
}

/**
 * Everything a pass decides from, as one string: two samples with the same key decide the same
 * (PIDs are re-read from /proc only when they first appear, so a reused PID changes the key
 * through its bytes or its absence in between).
 */
function sampleKey(
  processes: readonly { readonly gpuUuid: string; readonly pid: number; readonly bytes: number }[],
  records: readonly {
    readonly shardId: string;
    readonly state: string;
    readonly containerId?: string;
  }[],
  limits: readonly ShardLimits[],
): string {
  let key = '';
  for (const p of processes) key += `${p.gpuUuid}/${p.pid}/${p.bytes};`;
  key += '|';
  for (const r of records) key += `${r.shardId}/${r.state}/${r.containerId ?? ''};`;
  key += '|';
  for (const l of limits) {
    key += `${l.shardId}/${l.policy};`;
    for (const [gpu, bytes] of l.capBytes) key += `${gpu}=${bytes},`;
  }
  return key;
}

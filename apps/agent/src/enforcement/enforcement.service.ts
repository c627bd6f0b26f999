import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import {
  enforcementActions,
  type CapViolation,
  type EnforcementDecision,
  type ProcessUsage,
} from '@gpushards/limits';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { GpusService } from '../gpus/gpus.service.js';
import { LimitsService, type ShardLimits } from '../limits/limits.service.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { ShardsService } from '../shards/shards.service.js';
import { PolicyActions } from './policy-actions.js';
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

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly gpus: GpusService,
    private readonly shards: ShardsService,
    private readonly limits: LimitsService,
    /** Shared with the compute fence (ProcessOwnersModule). */
    private readonly owners: ProcessOwners,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'enforcement' });
    this.actions = new PolicyActions(shards);
  }

  /** Samples every `enforcement.intervalMs` until the module is destroyed. */
  start(): void {
    if (this.timer !== undefined || this.config.enforcement.intervalMs === 0) return;
    const tick = () => {
      this.running = this.sampleNow()
        .then(() => undefined)
        .catch((error: unknown) => this.logger.warn({ err: error }, 'GPU memory sample failed'))
        .finally(() => {
          this.running = undefined;
          if (this.timer !== undefined)
            this.timer = setTimeout(tick, this.config.enforcement.intervalMs);
        });
    };
    this.timer = setTimeout(tick, 0);
  }

  /** Called with each batch of violations acted on (the heartbeat sends them at once). */
  onViolations(listener: (violations: readonly ViolationRecord[]) => void): void {
    this.listeners.add(listener);
  }

  /** The last sample, for heartbeats; undefined before the first or where NVML cannot tell. */
  realUsage(): RealUsage | undefined {
    return this.latest;
  }

  /** One sample and what follows from it; resolves to what was done. */
  async sampleNow(): Promise<readonly ViolationRecord[]> {
    // Killed processes still listed: their GPUs are listed afresh until they are gone.
    const processes = this.gpus.processes(
      this.actions.anyDying ? this.actions.dyingPids() : undefined,
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
    return { sampledAt: now, shards, unattributed };
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
        done.push({ ...base, ...this.actions.kill(violation.pids, now) });
      } else if (violation.action === 'stop') {
        // One stop per shard, whatever GPUs it passed its cap on, until its processes are gone.
        const outcome = await this.actions.stopOnce(violation.shardId);
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

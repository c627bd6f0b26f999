import { Inject, Injectable, Optional, type OnModuleDestroy } from '@nestjs/common';
import {
  ungovernedCompute,
  ungovernedComputeMessage,
  type ComputeFenceDecision,
  type ProcessUtilization,
  type UngovernedFinding,
} from '@gpushards/limits';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { PolicyActions } from '../enforcement/policy-actions.js';
import { ProcessOwners } from '../enforcement/process-owners.js';
import { GpusService } from '../gpus/gpus.service.js';
import { LimitsService } from '../limits/limits.service.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import type { RegionDevice, RegionProcess } from '../regions/region-file.js';
import { RegionsService } from '../regions/regions.service.js';
import type { ShardRecord } from '../shards/shard-record.js';
import { ShardsService } from '../shards/shards.service.js';
import { namespacedProcess, ownLastLaunch } from './process-launches.js';

/** What the agent did about one finding; goes to the control plane as a shard event. */
export interface ComputeFindingRecord extends UngovernedFinding {
  readonly teamId: string;
  readonly at: string;
  /** Seconds from the shard's last launch through libvgpu.so there to the window's end. */
  readonly lastKernelSeconds?: number;
  /** kill: the processes actually signalled. */
  readonly killedPids: readonly number[];
  readonly error?: string;
}

/** A shard's region as a window read it; the process slots only where the shard was busy. */
interface ShardRegion {
  readonly devices: readonly RegionDevice[];
  readonly processes?: readonly RegionProcess[];
}

/** The clocks the fence reads (tests replace them). */
export interface FenceClock {
  /** CLOCK_MONOTONIC in ns: the ledger's clock. */
  readonly monotonicNs: () => bigint;
  /** Microseconds since the Unix epoch: NVML's sample stamps. */
  readonly wallUs: () => number;
}

/** Injection token for a FenceClock other than the system's (tests). */
export const FENCE_CLOCK = Symbol('FenceClock');

const SYSTEM_CLOCK: FenceClock = {
  monotonicNs: () => process.hrtime.bigint(),
  wallUs: () => Date.now() * 1000,
};

/** Why the fence does not run, or undefined when it does. */
export function computeFenceOffReason(config: AgentConfig): string | undefined {
  if (config.computeFence.windowSeconds === 0) return 'GPUSHARDS_COMPUTE_FENCE_SECONDS is 0';
  if (config.computeLedgerDir === undefined) {
    return 'this host has no compute ledger (GPUSHARDS_COMPUTE_LEDGER_DIR): no launch is governed, so none can be told from one that bypasses libvgpu.so';
  }
  if (config.mps !== undefined) {
    return "this host runs an MPS partition: NVML attributes every MPS client's work to the MPS server's pid (measured on an H100: the clients' pids got no samples, the server's showed 100 %), so a shard's own kernels cannot be told apart";
  }
  return undefined;
}

/**
 * The compute fence: every window (GPUSHARDS_COMPUTE_FENCE_SECONDS), NVML's per-process
 * utilization of every GPU, each process's shard through its cgroup, each shard's last launch
 * through libvgpu.so (its region), and the shard's cap policy applied to GPU work that no turn
 * governed
 * (ungovernedCompute in libs/limits decides). NVML is polled five times a window (at most
 * every second) so that a busy process gives several samples.
 */
@Injectable()
export class ComputeFenceService implements OnModuleDestroy {
  private readonly logger: Logger;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private readonly listeners = new Set<(records: readonly ComputeFindingRecord[]) => void>();
  /** This window's samples, its start, and the last sample stamp seen per GPU index. */
  private samples: ProcessUtilization[] = [];
  private windowStartNs: bigint | undefined;
  private readonly lastSeenUs = new Map<number, number>();
  private previous: ComputeFenceDecision | undefined;
  /** Kills and stops, and the PIDs killed until they are gone. */
  private readonly actions: PolicyActions;
  private unsupported = false;
  private readonly clock: FenceClock;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly gpus: GpusService,
    private readonly shards: ShardsService,
    private readonly limits: LimitsService,
    private readonly regions: RegionsService,
    /** Shared with the memory fence (ProcessOwnersModule). */
    private readonly owners: ProcessOwners,
    @Inject(LOGGER) logger: Logger,
    @Optional() @Inject(FENCE_CLOCK) clock?: FenceClock,
  ) {
    this.clock = clock ?? SYSTEM_CLOCK;
    this.logger = logger.child({ module: 'compute-fence' });
    this.actions = new PolicyActions(shards);
  }

  /** Whether the fence runs on this host (logged once by start()). */
  get enabled(): boolean {
    return computeFenceOffReason(this.config) === undefined && !this.unsupported;
  }

  /** Polls NVML and closes windows until the module is destroyed; logs why when it is off. */
  start(): void {
    if (this.timer !== undefined) return;
    const off = computeFenceOffReason(this.config);
    if (off !== undefined) {
      const log = this.config.mps !== undefined ? 'warn' : 'info';
      this.logger[log](`compute fence off: ${off}`);
      return;
    }
    const windowMs = this.config.computeFence.windowSeconds * 1000;
    const pollMs = Math.min(1000, windowMs / 5);
    this.logger.info(
      { windowSeconds: this.config.computeFence.windowSeconds, pollMs },
      'compute fence on',
    );
    this.begin();
    const tick = () => {
      this.running = this.tick(windowMs)
        .catch((error: unknown) => this.logger.warn({ err: error }, 'compute fence pass failed'))
        .finally(() => {
          this.running = undefined;
          if (this.timer !== undefined && !this.unsupported) this.timer = setTimeout(tick, pollMs);
        });
    };
    this.timer = setTimeout(tick, pollMs);
  }

  /** Called with each batch of findings acted on (the heartbeat sends them at once). */
  onFindings(listener: (records: readonly ComputeFindingRecord[]) => void): void {
    this.listeners.add(listener);
  }

  /** Starts a window now (and forgets the samples of any window under way). */
  begin(): void {
    this.samples = [];
    this.windowStartNs = this.clock.monotonicNs();
    // NVML keeps seconds of history: a first poll reads only from now.
    for (const gpu of this.gpus.inventory.gpus) {
      if (!this.lastSeenUs.has(gpu.index)) this.lastSeenUs.set(gpu.index, this.clock.wallUs());
    }
  }

  /** One poll: every GPU's process utilization since the last one, kept for the window. */
  poll(): void {
    for (const gpu of this.gpus.inventory.gpus) {
      const since = this.lastSeenUs.get(gpu.index) ?? this.clock.wallUs();
      const calledAt = this.clock.wallUs();
      const samples = this.gpus.processUtilization(gpu.index, since);
      if (samples === 'unsupported') {
        this.unsupported = true;
        this.logger.warn(
          'compute fence off: this GPU library gives no per-process utilization (nvmlDeviceGetProcessUtilization)',
        );
        return;
      }
      // The largest stamp seen; with none, nothing ran up to this call.
      this.lastSeenUs.set(
        gpu.index,
        samples.reduce(
          (latest, s) => Math.max(latest, s.timestampUs),
          samples.length ? 0 : calledAt,
        ),
      );
      for (const sample of samples) {
        this.samples.push({ pid: sample.pid, gpuUuid: gpu.uuid, smPercent: sample.smPercent });
      }
    }
  }

  /**
   * Closes the window under way: maps its samples to shards, reads their regions, decides, acts,
   * and starts the next window. Resolves to what was done.
   */
  async closeWindow(): Promise<readonly ComputeFindingRecord[]> {
    const startNs = this.windowStartNs ?? this.clock.monotonicNs();
    const records = this.shards.list();
    const samples = this.samples;
    // Attributed before the regions are read: which shards were busy decides how much of
    // their region to read.
    const byContainer = new Map(
      records.flatMap((r) => (r.containerId !== undefined ? [[r.containerId, r] as const] : [])),
    );
    const owned = samples.map((sample) => {
      const containerId = this.owners.containerOf(sample.pid);
      const shard = containerId === null ? undefined : byContainer.get(containerId);
      return shard === undefined ? sample : { ...sample, shardId: shard.shardId };
    });
    this.owners.endSample();
    const busy = this.busyPids(owned);
    const regions = await this.readRegions(records, busy);
    const endNs = this.clock.monotonicNs();
    this.begin();
    if (endNs <= startNs) return [];
    const now = Date.now();
    this.actions.forgetGone(now, (pid) => samples.some((s) => s.pid === pid));
    const known = new Set(records.map((r) => r.shardId));
    const decision = ungovernedCompute(
      owned,
      this.launches(records, regions),
      this.limits.all().filter((l) => known.has(l.shardId)),
      { startNs, endNs },
      this.previous,
      {
        thresholdPercent: this.config.computeFence.thresholdPercent,
        dying: this.actions.dyingPids(),
        processLaunches: this.processLaunches(busy, regions),
      },
    );
    this.previous = decision;
    const done = await this.apply(decision, endNs, now);
    if (done.length > 0) for (const listener of this.listeners) listener(done);
    return done;
  }

  /** The processes of each shard with a sample at or above the threshold. */
  private busyPids(owned: readonly ProcessUtilization[]): Map<string, Set<number>> {
    const threshold = this.config.computeFence.thresholdPercent;
    const busyByShard = new Map<string, Set<number>>();
    for (const sample of owned) {
      if (sample.shardId === undefined || sample.smPercent < threshold) continue;
      const pids = busyByShard.get(sample.shardId) ?? new Set<number>();
      busyByShard.set(sample.shardId, pids.add(sample.pid));
    }
    return busyByShard;
  }

  /**
   * Each shard's region, read once a window: its device table for everyone, and the whole file
   * with the process slots for a shard in `busy`. A region that cannot be read is left out.
   */
  private async readRegions(
    records: readonly ShardRecord[],
    busy: ReadonlyMap<string, ReadonlySet<number>>,
  ): Promise<Map<string, ShardRegion>> {
    const regions = new Map<string, ShardRegion>();
    for (const { shardId } of records) {
      try {
        regions.set(
          shardId,
          busy.has(shardId)
            ? await this.regions.devicesAndProcesses(shardId)
            : { devices: await this.regions.devices(shardId) },
        );
      } catch (error) {
        this.logger.warn({ err: error, shardId }, 'cannot read a shard region');
      }
    }
    return regions;
  }

  /**
   * The own last launch of every busy process, from its slot in its shard's region
   * (process-launches.ts): what tells a process that bypasses libvgpu.so from a sibling that
   * launches through it. A shard whose region could not be read leaves its processes unknown.
   */
  private processLaunches(
    busy: ReadonlyMap<string, ReadonlySet<number>>,
    regions: ReadonlyMap<string, ShardRegion>,
  ): Map<number, bigint | null> {
    const launches = new Map<number, bigint | null>();
    for (const [shardId, pids] of busy) {
      const slots = regions.get(shardId)?.processes;
      if (slots === undefined) continue;
      for (const pid of pids) {
        const own = ownLastLaunch(namespacedProcess(this.config.enforcement.procRoot, pid), slots);
        if (own !== undefined) launches.set(pid, own);
      }
    }
    return launches;
  }

  /**
   * Each shard's last launch through libvgpu.so per GPU, from its own region (which only its
   * container writes): the ledger's stamps would let a neighbour forge its own or erase
   * another's. A region that could not be read reads as no launch.
   */
  private launches(records: readonly ShardRecord[], regions: ReadonlyMap<string, ShardRegion>) {
    const launches: { shardId: string; gpuUuid: string; lastKernelNs: bigint }[] = [];
    for (const record of records) {
      for (const device of regions.get(record.shardId)?.devices ?? []) {
        launches.push({
          shardId: record.shardId,
          gpuUuid: this.gpus.canonicalUuid(device.uuid),
          lastKernelNs: device.lastLaunchNs,
        });
      }
    }
    return launches;
  }

  async onModuleDestroy(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  private async tick(windowMs: number): Promise<void> {
    this.poll();
    if (this.unsupported) return;
    const elapsedMs = Number(this.clock.monotonicNs() - (this.windowStartNs ?? 0n)) / 1e6;
    if (elapsedMs >= windowMs) await this.closeWindow();
  }

  private async apply(
    decision: ComputeFenceDecision,
    endNs: bigint,
    now: number,
  ): Promise<ComputeFindingRecord[]> {
    this.actions.keepStopping(new Set(decision.findings.map((f) => f.shardId)));
    const done: ComputeFindingRecord[] = [];
    for (const finding of decision.findings) {
      if (!finding.act) continue;
      const record = this.shards.list().find((r) => r.shardId === finding.shardId);
      if (record === undefined) continue;
      const base = {
        ...finding,
        teamId: record.teamId,
        at: new Date(now).toISOString(),
        ...(finding.lastKernelNs !== undefined && finding.lastKernelNs > 0n
          ? { lastKernelSeconds: Math.max(0, Number(endNs - finding.lastKernelNs) / 1e9) }
          : {}),
      };
      if (finding.action === 'kill') {
        done.push({ ...base, ...this.actions.kill(finding.pids, now) });
      } else if (finding.action === 'stop') {
        const outcome = await this.actions.stopOnce(finding.shardId);
        if (outcome !== undefined) done.push({ ...base, ...outcome });
      } else {
        done.push({ ...base, killedPids: [] });
      }
    }
    for (const record of done) {
      const top = record.processes[0];
      this.logger.warn(
        {
          shardId: record.shardId,
          teamId: record.teamId,
          gpu: record.gpuUuid,
          busyPercent: record.busyPercent,
          samples: record.samples,
          action: record.action,
          pids: record.processes.map((p) => p.pid),
          killedPids: record.killedPids,
          ...(record.error ? { error: record.error } : {}),
        },
        top
          ? ungovernedComputeMessage(top.pid, top.smPercent, record.windowSeconds)
          : 'ungoverned GPU work',
      );
    }
    return done;
  }
}

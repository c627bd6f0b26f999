import { Inject, Injectable } from '@nestjs/common';
import { PROTOCOL_VERSION, type Heartbeat } from '@gpushards/protocol';

import {
  ComputeFenceService,
  type ComputeFindingRecord,
} from '../compute/compute-fence.service.js';
import { LedgerActivity, type GpuActivity } from '../compute/ledger-activity.js';
import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { EnforcementService, type ViolationRecord } from '../enforcement/enforcement.service.js';
import { GpusService } from '../gpus/gpus.service.js';
import { AGENT_LINK, type AgentLink } from '../link/agent-link.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { MemoryService } from '../memory/memory.service.js';
import type { RegionDevice } from '../regions/region-file.js';
import { RegionWatchService } from '../regions/region-watch.service.js';
import { RegionsService } from '../regions/regions.service.js';
import { ShardsService } from '../shards/shards.service.js';

/**
 * Builds and sends heartbeats: each GPU's used memory and utilization from NVML, and each
 * running shard's used bytes per GPU from its region file (what the interposer counted).
 */
@Injectable()
export class HeartbeatService {
  private readonly logger: Logger;
  private sequence = 0;
  /** Violations acted on and not sent yet. */
  private violations: ViolationRecord[] = [];
  /** Ungoverned GPU work acted on and not sent yet. */
  private ungoverned: ComputeFindingRecord[] = [];
  /** Each shard's GPU activity from the host's compute ledger, when it has one. */
  private readonly activity: LedgerActivity | undefined;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    @Inject(AGENT_LINK) private readonly link: AgentLink,
    private readonly gpus: GpusService,
    private readonly regions: RegionsService,
    private readonly shards: ShardsService,
    private readonly enforcement: EnforcementService,
    private readonly memory: MemoryService,
    private readonly regionWatch: RegionWatchService,
    computeFence: ComputeFenceService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'heartbeat' });
    this.activity =
      config.computeLedgerDir !== undefined
        ? new LedgerActivity(config.computeLedgerDir)
        : undefined;
    // A violation goes out at once, not with the next periodic heartbeat.
    this.enforcement.onViolations((violations) => {
      this.violations.push(...violations);
      void this.beat().catch((error: unknown) =>
        this.logger.warn({ err: error }, 'could not send a violation heartbeat'),
      );
    });
    computeFence.onFindings((records) => {
      this.ungoverned.push(...records);
      void this.beat().catch((error: unknown) =>
        this.logger.warn({ err: error }, 'could not send a compute fence heartbeat'),
      );
    });
  }

  async beat(): Promise<void> {
    await this.regions.applyPendingLimits();
    // Shards adopted after a restart get their bells watched too.
    this.regionWatch.sync(this.shards.list().map((shard) => shard.shardId));
    await this.link.heartbeat(await this.build());
  }

  async build(): Promise<Heartbeat> {
    const real = this.enforcement.realUsage();
    const realOf = (shardId: string, gpuUuids: readonly string[]) =>
      real === undefined
        ? {}
        : {
            realBytesPerGpu: gpuUuids.map((gpuUuid) => ({
              gpuUuid,
              realBytes: real.shards.get(shardId)?.get(gpuUuid) ?? 0,
            })),
          };
    let activity: Map<string, GpuActivity[]> | undefined;
    try {
      activity = await this.activity?.sample();
    } catch (error) {
      this.logger.warn({ err: error }, 'cannot read the compute ledger');
    }
    const monotonicNow = process.hrtime.bigint();
    /**
     * Busy time from the ledger; the last launch from the shard's own region (`devices`), which
     * no other shard can write: a neighbour erasing a ledger stamp must not make it look idle.
     */
    const activityOf = (
      shardId: string,
      gpuUuids: readonly string[],
      devices: readonly RegionDevice[],
    ) => {
      if (activity === undefined) return {};
      const held = (activity.get(shardId) ?? [])
        .map((a) => ({ ...a, gpuUuid: this.gpus.canonicalUuid(a.gpuUuid) }))
        .filter((a) => gpuUuids.includes(a.gpuUuid));
      return {
        activityPerGpu: gpuUuids.map((gpuUuid) => {
          // No ledger entry: it never held this GPU's time. Said, so that the control plane
          // knows its activity is watched (the idle policy judges only shards whose host
          // reports activity).
          const busy = held.find((a) => a.gpuUuid === gpuUuid) ?? { gpuUuid, busyRatio: 0 };
          const last = devices.find((d) => this.gpus.canonicalUuid(d.uuid) === gpuUuid);
          return last !== undefined && last.lastLaunchNs > 0n
            ? {
                ...busy,
                lastKernelSeconds: Math.max(0, Number(monotonicNow - last.lastLaunchNs) / 1e9),
              }
            : busy;
        }),
      };
    };
    const violations = this.violations.splice(0).map((v) => ({
      shardId: v.shardId,
      gpuUuid: v.gpuUuid,
      realBytes: v.realBytes,
      capBytes: v.capBytes,
      toleranceBytes: v.toleranceBytes,
      action: v.action,
      pid: v.process.pid,
      processBytes: v.process.bytes,
      killedPids: [...v.killedPids],
      ...(v.error !== undefined ? { error: v.error.slice(0, 4096) } : {}),
      at: v.at,
    }));
    const ungovernedCompute = this.ungoverned.splice(0).flatMap((f) => {
      const top = f.processes[0];
      if (top === undefined) return [];
      return [
        {
          shardId: f.shardId,
          gpuUuid: f.gpuUuid,
          action: f.action,
          pid: top.pid,
          smPercent: top.smPercent,
          pids: f.processes.map((p) => p.pid).slice(0, 4096),
          busyPercent: f.busyPercent,
          samples: f.samples,
          busySamples: f.busySamples,
          thresholdPercent: f.thresholdPercent,
          windowSeconds: f.windowSeconds,
          ...(f.lastKernelSeconds !== undefined ? { lastKernelSeconds: f.lastKernelSeconds } : {}),
          killedPids: [...f.killedPids],
          ...(f.error !== undefined ? { error: f.error.slice(0, 4096) } : {}),
          at: f.at,
        },
      ];
    });
    const pressureReliefs = this.enforcement.takePressureReliefs();
    const shards: Heartbeat['shards'] = [];
    for (const shard of this.shards.list()) {
      if (shard.state !== 'RUNNING') continue;
      try {
        const devices = await this.regions.devices(shard.shardId);
        shards.push({
          shardId: shard.shardId,
          usedBytesPerGpu: devices
            .map((d) => ({ gpuUuid: this.gpus.canonicalUuid(d.uuid), usedBytes: d.usedBytes }))
            // Only the shard's GPUs: a container cannot report on another GPU.
            .filter((gpu) => shard.gpuUuids.includes(gpu.gpuUuid)),
          ...realOf(shard.shardId, shard.gpuUuids),
          ...activityOf(shard.shardId, shard.gpuUuids, devices),
          ...this.memory.memoryOf(shard.shardId),
        });
      } catch (error) {
        // A region a container corrupted must not stop the heartbeat of the others.
        this.logger.warn({ err: error, shardId: shard.shardId }, 'cannot read a shard region');
        shards.push({
          shardId: shard.shardId,
          usedBytesPerGpu: [],
          ...realOf(shard.shardId, shard.gpuUuids),
          ...activityOf(shard.shardId, shard.gpuUuids, []),
          ...this.memory.memoryOf(shard.shardId),
        });
      }
    }
    const samples = this.gpus.sample();
    // GPUs listed in configuration have no driver that sees the shards' allocations;
    // what the shards' interposers count is the truth there.
    const gpus = !this.gpus.driverCountsUsage
      ? samples.map((sample) => ({
          ...sample,
          usedBytes: shards
            .flatMap((shard) => shard.usedBytesPerGpu)
            .filter((usage) => usage.gpuUuid === sample.uuid)
            .reduce((sum, usage) => sum + usage.usedBytes, 0),
        }))
      : samples;
    return {
      protocolVersion: PROTOCOL_VERSION,
      hostId: this.config.hostId,
      sentAt: new Date().toISOString(),
      sequence: this.sequence++,
      gpus,
      shards,
      ...(real !== undefined
        ? {
            unattributedBytesPerGpu: [...real.unattributed].map(([gpuUuid, bytes]) => ({
              gpuUuid,
              bytes,
            })),
          }
        : {}),
      ...(violations.length > 0 ? { violations } : {}),
      ...(ungovernedCompute.length > 0 ? { ungovernedCompute } : {}),
      ...(pressureReliefs.length > 0 ? { pressureReliefs } : {}),
    };
  }
}

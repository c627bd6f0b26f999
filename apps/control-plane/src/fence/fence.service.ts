import { Inject, Injectable } from '@nestjs/common';
import { ungovernedComputeMessage } from '@gpushards/limits';
import type { CapViolationMessage, Heartbeat, UngovernedComputeMessage } from '@gpushards/protocol';
import { Counter, Registry } from 'prom-client';
import { PrismaService } from '../database/index.js';
import { ShardEventBus, type ShardStateChange } from '../events/shard-event-bus.js';
import { recordShardEvents } from '../events/shard-event-store.js';
import { sizeOf } from '../graphql/size.model.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { fromProtocolPolicy } from './cap-policies.js';
import type { CapViolation } from './cap-policy.model.js';
import type { UngovernedCompute } from './ungoverned-compute.model.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * What heartbeats say about the host fence beyond its readings (each shard's real bytes and
 * activity per GPU, memory of no shard per GPU: written with the fleet's heartbeat batch,
 * fleet/heartbeat-rows.ts): the violations the agent acted on, which become VIOLATION shard
 * events (shardEvents) and count in gpushards_cap_violations_total; and the compute fence's
 * findings (GPU work no compute-ledger turn governed), which become UNGOVERNED_COMPUTE shard
 * events and count in gpushards_compute_fence_findings_total.
 */
@Injectable()
export class FenceService {
  private readonly logger: Logger;
  private readonly violations: Counter<'action' | 'team'>;
  private readonly computeFindings: Counter<'action' | 'team'>;

  constructor(
    private readonly prisma: PrismaService,
    private readonly events: ShardEventBus,
    registry: Registry,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fence' });
    this.violations = new Counter({
      name: 'gpushards_cap_violations_total',
      help: "Shards whose real GPU memory (NVML) passed their cap plus the host's tolerance, by the action the agent took (kill, stop, report) and team.",
      labelNames: ['action', 'team'],
      registers: [registry],
    });
    this.computeFindings = new Counter({
      name: 'gpushards_compute_fence_findings_total',
      help: 'Shards whose processes ran GPU work outside the compute ledger (NVML busy, no launch through libvgpu.so, two windows in a row), by the action the agent took (kill, stop, report) and team.',
      labelNames: ['action', 'team'],
      registers: [registry],
    });
  }

  /**
   * A heartbeat's findings, after the fleet recorded it for a known host: violations and
   * ungoverned GPU work, each on a shard of this host, become shard events. (Its readings, real
   * bytes, activity and unattributed bytes, are written with the fleet's batch:
   * AgentReportsService.recordHeartbeats.)
   */
  async recordFindings(hostId: string, heartbeat: Heartbeat): Promise<void> {
    for (const violation of heartbeat.violations ?? []) {
      await this.recordViolation(hostId, violation).catch((error: unknown) =>
        this.logger.warn(
          { err: error, hostId, shardId: violation.shardId },
          'could not record a cap violation',
        ),
      );
    }
    for (const finding of heartbeat.ungovernedCompute ?? []) {
      await this.recordUngoverned(hostId, finding).catch((error: unknown) =>
        this.logger.warn(
          { err: error, hostId, shardId: finding.shardId },
          'could not record ungoverned GPU work',
        ),
      );
    }
  }

  /** A shard of this host, or undefined (logged: an agent reports on its own shards only). */
  private async shardOfHost(hostId: string, shardId: string, what: string) {
    if (!UUID.test(shardId)) return undefined;
    const shard = await this.prisma.shard.findUnique({ where: { id: shardId } });
    if (shard === null || shard.hostId !== hostId) {
      this.logger.warn({ hostId, shardId }, `${what} of a shard not on this host; ignored`);
      return undefined;
    }
    const team = await this.prisma.team.findUnique({
      where: { id: shard.teamId },
      select: { name: true },
    });
    return { shard, teamName: team?.name ?? shard.teamId };
  }

  private async recordUngoverned(hostId: string, message: UngovernedComputeMessage): Promise<void> {
    const found = await this.shardOfHost(hostId, message.shardId, 'ungoverned GPU work');
    if (found === undefined) return;
    const { shard, teamName } = found;
    this.computeFindings.inc({ action: message.action, team: teamName });
    const at = new Date(message.at);
    const ungovernedCompute: UngovernedCompute = {
      gpuUuid: message.gpuUuid,
      action: fromProtocolPolicy(message.action),
      pid: message.pid,
      smPercent: message.smPercent,
      pids: message.pids,
      busyPercent: message.busyPercent,
      samples: message.samples,
      busySamples: message.busySamples,
      thresholdPercent: message.thresholdPercent,
      windowSeconds: message.windowSeconds,
      lastKernelAt:
        message.lastKernelSeconds !== undefined && Number.isFinite(at.getTime())
          ? new Date(at.getTime() - message.lastKernelSeconds * 1000)
          : null,
      killedPids: message.killedPids,
      error: message.error ?? null,
      message: ungovernedComputeMessage(message.pid, message.smPercent, message.windowSeconds),
    };
    this.logger.warn({ hostId, teamId: shard.teamId, ...message }, ungovernedCompute.message);
    await this.publish({
      shard,
      previousState: shard.state,
      state: shard.state,
      at,
      ungovernedCompute,
    });
  }

  private async recordViolation(hostId: string, message: CapViolationMessage): Promise<void> {
    const found = await this.shardOfHost(hostId, message.shardId, 'cap violation');
    if (found === undefined) return;
    const { shard, teamName } = found;
    this.violations.inc({ action: message.action, team: teamName });
    const violation: CapViolation = {
      gpuUuid: message.gpuUuid,
      real: sizeOf(message.realBytes),
      cap: sizeOf(message.capBytes),
      tolerance: sizeOf(message.toleranceBytes),
      action: fromProtocolPolicy(message.action),
      pid: message.pid,
      processMemory: sizeOf(message.processBytes),
      killedPids: message.killedPids,
      error: message.error ?? null,
    };
    this.logger.warn(
      { hostId, teamId: shard.teamId, ...message },
      'shard passed its GPU memory cap',
    );
    await this.publish({
      shard,
      previousState: shard.state,
      state: shard.state,
      at: new Date(message.at),
      violation,
    });
  }

  /**
   * Stores the notice, then publishes it. A notice changes no row, so it has no transaction of
   * its own to share: it is stored by a statement of its own right before it is published (one
   * that cannot be stored is still published, and logged).
   */
  private async publish(change: ShardStateChange): Promise<void> {
    await recordShardEvents(this.prisma.direct, [change]).catch((error: unknown) =>
      this.logger.warn(
        { err: error, shardId: change.shard.id, teamId: change.shard.teamId },
        'could not store a shard event; published all the same',
      ),
    );
    this.events.publish(change);
  }
}

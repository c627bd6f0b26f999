import { Inject, Injectable } from '@nestjs/common';
import { PROTOCOL_VERSION, type Heartbeat } from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { GpusService } from '../gpus/gpus.service.js';
import { AGENT_LINK, type AgentLink } from '../link/agent-link.js';
import { LOGGER, type Logger } from '../logging/logger.js';
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

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    @Inject(AGENT_LINK) private readonly link: AgentLink,
    private readonly gpus: GpusService,
    private readonly regions: RegionsService,
    private readonly shards: ShardsService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'heartbeat' });
  }

  async beat(): Promise<void> {
    await this.regions.applyPendingLimits();
    await this.link.heartbeat(await this.build());
  }

  async build(): Promise<Heartbeat> {
    const shards: Heartbeat['shards'] = [];
    for (const shard of this.shards.list()) {
      if (shard.state !== 'RUNNING') continue;
      try {
        const usage = await this.regions.usage(shard.shardId);
        shards.push({
          shardId: shard.shardId,
          usedBytesPerGpu: usage
            .map((gpu) => ({ ...gpu, gpuUuid: this.gpus.canonicalUuid(gpu.gpuUuid) }))
            // Only the shard's GPUs: a container cannot report on another GPU.
            .filter((gpu) => shard.gpuUuids.includes(gpu.gpuUuid)),
        });
      } catch (error) {
        // A region a container corrupted must not stop the heartbeat of the others.
        this.logger.warn({ err: error, shardId: shard.shardId }, 'cannot read a shard region');
        shards.push({ shardId: shard.shardId, usedBytesPerGpu: [] });
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
    };
  }
}

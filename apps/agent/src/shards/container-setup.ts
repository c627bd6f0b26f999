import { Inject, Injectable } from '@nestjs/common';
import type { ShardLaunchSpec } from '@gpushards/protocol';
import type { ContainerCreateOptions } from 'dockerode';

import { prepareLedgerDir } from '../compute/ledger-activity.js';
import { isolatedLaunchProblem, mpsThreadPercent } from '../compute/mps-partition.js';
import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { buildCreateOptions, orderGpus, type ShardGpu } from '../containers/container-spec.js';
import { InterposerFiles } from '../containers/interposer-files.js';
import { GpusService } from '../gpus/gpus.service.js';
import { LimitsService } from '../limits/limits.service.js';
import { RegionsService } from '../regions/regions.service.js';

/**
 * What a shard's new container is given on this host: a fresh region folder, its limits file
 * (caps, compute share, MPS percentage), the host's compute ledger and MPS pipe folder when
 * it has them, and the Docker create request built from all of it (container-spec.ts).
 */
@Injectable()
export class ContainerSetup {
  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    private readonly regions: RegionsService,
    private readonly limits: LimitsService,
    private readonly gpus: GpusService,
    private readonly interposer: InterposerFiles,
  ) {}

  /**
   * Why this host cannot run the shard as its spec asks (an isolated shard without the host's
   * MPS partition, or one that does not fit in it), or undefined.
   */
  refusal(spec: ShardLaunchSpec): string | undefined {
    return isolatedLaunchProblem(this.config.hostId, this.config.mps, spec.compute);
  }

  /** Writes the shard's host files and returns the Docker create request for its container. */
  async prepare(
    spec: ShardLaunchSpec,
    gpus: readonly ShardGpu[],
    env: Record<string, string>,
  ): Promise<ContainerCreateOptions> {
    // A fresh region: counters of an earlier container must not carry over.
    await this.regions.remove(spec.shardId);
    const regionDir = await this.regions.prepare(spec.shardId);
    const inventory = this.gpus.inventory;
    const mps =
      this.config.mps === undefined
        ? undefined
        : {
            pipeDir: this.config.mps.pipeDir,
            threadPercent: mpsThreadPercent(this.config.mps, spec.compute),
          };
    const limitsFile = await this.limits.prepare(
      spec.shardId,
      orderGpus(gpus).map((gpu) => ({ uuid: gpu.uuid, limitBytes: gpu.limitBytes })),
      inventory.contextOverheadBytes,
      spec.capPolicy,
      spec.compute,
      mps?.threadPercent,
    );
    if (this.config.computeLedgerDir !== undefined)
      await prepareLedgerDir(this.config.computeLedgerDir);
    return buildCreateOptions({
      hostId: this.config.hostId,
      shardId: spec.shardId,
      teamId: spec.teamId,
      image: spec.image,
      ...(spec.command ? { command: spec.command } : {}),
      env,
      gpus,
      interposerPath: this.interposer.interposerPath,
      preloadFile: this.interposer.preloadFile,
      regionDir,
      limitsFile,
      ...(this.config.computeLedgerDir !== undefined
        ? { ledgerDir: this.config.computeLedgerDir }
        : {}),
      ...(mps !== undefined ? { mps } : {}),
      pidsLimit: this.config.containers.pidsLimit,
      ...(this.config.containers.user !== undefined ? { user: this.config.containers.user } : {}),
      ...(inventory.contextOverheadBytes > 0
        ? { contextBytes: inventory.contextOverheadBytes }
        : {}),
      simulated: inventory.simulated,
      ...(this.gpus.simulatedDriver ? { simulatedDriver: this.gpus.simulatedDriver } : {}),
    });
  }
}

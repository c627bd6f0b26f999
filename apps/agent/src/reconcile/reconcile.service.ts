import { Inject, Injectable } from '@nestjs/common';
import type { ObservedMemory } from '@gpushards/limits';
import { PROTOCOL_VERSION, type ReconcileReply } from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { AGENT_LINK, type AgentLink } from '../link/agent-link.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { MemoryService } from '../memory/memory.service.js';
import { ShardsService } from '../shards/shards.service.js';
import { observedKind, planReconcile, type DesiredState } from './plan.js';

const BUSY: ReadonlySet<string> = new Set(['PULLING', 'STARTING']);

/**
 * Level-triggered reconciliation: report every shard container, receive what should run,
 * converge. Also applies the desired state a register reply carries.
 */
@Injectable()
export class ReconcileService {
  private readonly logger: Logger;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    @Inject(AGENT_LINK) private readonly link: AgentLink,
    private readonly shards: ShardsService,
    private readonly memory: MemoryService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'reconcile' });
  }

  /** One round: sweep Docker, ask the control plane, act on its answer. */
  async reconcileOnce(): Promise<void> {
    const observedAt = new Date().toISOString();
    await this.shards.sweep();
    const mark = this.shards.commandMark();
    const memory = await this.memory.observeAll();
    const containers = this.shards.list().flatMap((shard) => {
      if (shard.containerId === undefined) return [];
      const busy = shard.pull !== undefined || BUSY.has(shard.state);
      const kind = observedKind(shard);
      return [
        {
          shardId: shard.shardId,
          containerId: shard.containerId,
          // A starting container is not a stopped one: reported as stopped, an older control
          // plane that already applied its RUNNING event would end the shard.
          running: kind === 'running' || busy,
          ...(busy || kind === 'absent' ? {} : { status: kind }),
          ...(kind === 'exited' && shard.exitCode !== undefined
            ? { exitCode: shard.exitCode }
            : {}),
          ...(busy ? { busy } : {}),
          ...(kind === 'running' && memory?.has(shard.shardId)
            ? { memory: memory.get(shard.shardId)! }
            : {}),
        },
      ];
    });
    const reply: ReconcileReply = await this.link.reconcile({
      protocolVersion: PROTOCOL_VERSION,
      hostId: this.config.hostId,
      containers,
      observedAt,
      acceptsKeptShards: true,
    });
    await this.apply(reply, mark, memory);
  }

  /**
   * Acts on a desired state received for a request sent when commandMark() was `mark`, with
   * where the running shards' memory was seen (read now when not given). Each action runs on
   * its own; one failing does not stop the others.
   */
  async apply(
    desired: DesiredState,
    mark: number,
    memory?: ReadonlyMap<string, ObservedMemory>,
  ): Promise<void> {
    const seen = memory ?? (await this.memory.observeAll());
    // Read together, after the wait: a launch that arrived while the memory was read is in the
    // list and must be in the skip set too, or the reply (older than it) would remove it.
    const skip = this.shards.commandedSince(mark);
    const known = this.shards.list().map((shard) => {
      const where = seen?.get(shard.shardId);
      return where === undefined ? shard : { ...shard, memory: where };
    });
    const plan = planReconcile(known, desired, skip);
    if ((desired.keptShardIds?.length ?? 0) > 0) {
      this.logger.warn(
        { kept: desired.keptShardIds },
        "the control plane cannot open these shards' secrets: their containers are left as they are",
      );
    }
    const count =
      plan.launch.length +
      plan.stop.length +
      plan.remove.length +
      plan.unpause.length +
      plan.discard.length +
      plan.suspend.length +
      plan.resume.length;
    if (count > 0) {
      this.logger.info(
        {
          launch: plan.launch.map((spec) => spec.shardId),
          stop: plan.stop,
          remove: plan.remove,
          unpause: plan.unpause,
          discard: plan.discard,
          suspend: plan.suspend,
          resume: plan.resume,
          skipped: [...skip],
        },
        'reconciling',
      );
    }
    const actions: Promise<unknown>[] = [
      ...plan.launch.map((spec) =>
        this.attempt('launch', spec.shardId, () => this.shards.launch(spec)),
      ),
      ...plan.applyLimits.map((spec) =>
        this.attempt('apply caps of', spec.shardId, () => this.shards.applyLimits(spec)),
      ),
      ...plan.stop.map((shardId) =>
        this.attempt('stop', shardId, () =>
          this.shards.stop(shardId, this.config.stopGraceSeconds),
        ),
      ),
      ...plan.unpause.map((shardId) =>
        this.attempt('unpause', shardId, () => this.shards.unpause(shardId)),
      ),
      ...plan.discard.map((shardId) =>
        this.attempt('remove the dead container of', shardId, () =>
          this.shards.discardContainer(shardId),
        ),
      ),
      // Taken on here; each move's end follows as its events.
      ...plan.suspend.map((shardId) =>
        this.attempt('suspend', shardId, () => this.memory.suspend(shardId, 'reconcile')),
      ),
      ...plan.resume.map((shardId) =>
        this.attempt('resume', shardId, () => this.memory.resume(shardId, 'reconcile')),
      ),
      ...plan.remove.map((shardId) =>
        this.attempt('remove', shardId, () => this.shards.delete(shardId)),
      ),
    ];
    await Promise.all(actions);
  }

  private async attempt(
    what: string,
    shardId: string,
    action: () => Promise<unknown>,
  ): Promise<void> {
    try {
      await action();
    } catch (error) {
      this.logger.warn({ err: error, shardId }, `reconcile could not ${what} a shard`);
    }
  }
}

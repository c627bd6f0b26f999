import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import type { MoveDirection } from '@gpushards/limits';
import { PROTOCOL_VERSION } from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { AGENT_LINK, type AgentLink } from '../link/agent-link.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { AgentMetrics } from '../metrics/agent-metrics.js';
import { RegionWatchService, type WakeRing } from '../regions/region-watch.service.js';
import { MemoryService } from './memory.service.js';

/**
 * One wake message per shard at most this often: the first ring goes out at once, the rings
 * after it within this time become one more message with the latest count. A tenant ringing
 * in a loop costs the link one message a second.
 */
export const WAKE_INTERVAL_MS = 1000;

interface Sleeper {
  /** CLOCK_MONOTONIC ns when its suspend began: no ring of this sleep is older. */
  readonly since: bigint;
  /** The first ring of this sleep (clamped to since..now): the wake's `at` and latency start. */
  firstRingNs?: bigint;
  /** The latest count seen, and the one last published. */
  requests: bigint;
  published: bigint;
  lastPublishedAt: number;
  timer?: NodeJS.Timeout;
}

/**
 * Wake requests (docs/elastic.md, "On demand"): a process of a suspended shard made a CUDA call
 * that needs the GPU, libvgpu.so counted it in the shard's region and rang the bell; the agent
 * publishes a `wake` on gpushards.agent.<host>.wake, and the control plane finds room through
 * its queue and sends a resume. Only for a shard whose memory is suspended or being suspended:
 * a ring of a resident or resuming shard is nobody's business. The time from a sleep's first ring
 * to its RESUMED is the wake latency (gpushards_agent_wake_latency_seconds).
 */
@Injectable()
export class WakeService implements OnModuleDestroy {
  private readonly sleepers = new Map<string, Sleeper>();
  private readonly logger: Logger;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    @Inject(AGENT_LINK) private readonly link: AgentLink,
    private readonly memory: MemoryService,
    private readonly metrics: AgentMetrics,
    watch: RegionWatchService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'wake' });
    watch.onWake((ring) => this.onRing(ring));
    memory.onMoveStart((shardId, direction) => {
      if (direction === 'suspend') this.sleep(shardId);
    });
    memory.onMoveEnd((shardId, direction, ok) => this.moved(shardId, direction, ok));
  }

  onModuleDestroy(): void {
    for (const sleeper of this.sleepers.values()) clearTimeout(sleeper.timer);
    this.sleepers.clear();
  }

  private sleep(shardId: string): Sleeper {
    const old = this.sleepers.get(shardId);
    clearTimeout(old?.timer);
    const sleeper: Sleeper = {
      since: process.hrtime.bigint(),
      requests: 0n,
      published: 0n,
      lastPublishedAt: -Infinity,
    };
    this.sleepers.set(shardId, sleeper);
    return sleeper;
  }

  private moved(shardId: string, direction: MoveDirection, ok: boolean): void {
    if (direction !== 'resume' || !ok) return;
    const sleeper = this.sleepers.get(shardId);
    this.sleepers.delete(shardId);
    clearTimeout(sleeper?.timer);
    if (sleeper?.firstRingNs === undefined) return;
    const seconds = Number(process.hrtime.bigint() - sleeper.firstRingNs) / 1e9;
    this.metrics.wakeLatency.observe(seconds);
    this.logger.info({ shardId, wakeLatencySeconds: seconds }, 'woken');
  }

  private onRing(ring: WakeRing): void {
    const moving = this.memory.moving(ring.shardId);
    const memory = this.memory.memoryOf(ring.shardId)?.memory;
    const asleep =
      moving === 'suspend' ||
      (moving === undefined && memory !== undefined && memory !== 'resident');
    if (!asleep) return;
    // A shard found suspended after a restart sleeps since the agent saw it.
    const sleeper = this.sleepers.get(ring.shardId) ?? this.sleep(ring.shardId);
    const now = process.hrtime.bigint();
    // The stamp is the tenant's word: held within this sleep.
    const at = ring.atNs < sleeper.since ? sleeper.since : ring.atNs > now ? now : ring.atNs;
    sleeper.firstRingNs ??= at;
    if (ring.requests > sleeper.requests) sleeper.requests = ring.requests;
    this.publishSoon(ring.shardId, sleeper);
  }

  private publishSoon(shardId: string, sleeper: Sleeper): void {
    if (sleeper.timer !== undefined || sleeper.requests <= sleeper.published) return;
    const wait = sleeper.lastPublishedAt + WAKE_INTERVAL_MS - performance.now();
    if (wait <= 0) {
      this.publish(shardId, sleeper);
      return;
    }
    sleeper.timer = setTimeout(() => {
      sleeper.timer = undefined;
      if (this.sleepers.get(shardId) === sleeper) this.publish(shardId, sleeper);
    }, wait);
  }

  private publish(shardId: string, sleeper: Sleeper): void {
    sleeper.lastPublishedAt = performance.now();
    sleeper.published = sleeper.requests;
    const first = sleeper.firstRingNs ?? process.hrtime.bigint();
    const agoMs = Number(process.hrtime.bigint() - first) / 1e6;
    const requests = Number(
      sleeper.requests > BigInt(Number.MAX_SAFE_INTEGER)
        ? BigInt(Number.MAX_SAFE_INTEGER)
        : sleeper.requests,
    );
    this.metrics.wakes.inc();
    this.logger.info({ shardId, requests }, 'a suspended shard asked for its GPU');
    this.link
      .publishWake({
        protocolVersion: PROTOCOL_VERSION,
        hostId: this.config.hostId,
        shardId,
        at: new Date(Date.now() - agoMs).toISOString(),
        requests,
      })
      .catch((error: unknown) =>
        this.logger.warn({ err: error, shardId }, 'could not publish a wake request'),
      );
  }
}

import { randomUUID } from 'node:crypto';

import { Inject, Injectable } from '@nestjs/common';
import { PROTOCOL_VERSION, type ShardState, type ShardStateEvent } from '@gpushards/protocol';

import { AGENT_CONFIG, type AgentConfig } from '../config/agent-options.js';
import { protocolText } from '@gpushards/protocol';
import { AGENT_LINK, type AgentLink } from '../link/agent-link.js';
import { LOGGER, type Logger } from '../logging/logger.js';

export interface StateDetails {
  readonly containerId?: string;
  readonly exitCode?: number;
  readonly reason?: string;
  readonly progress?: { completedBytes: number; totalBytes?: number };
  /** With SUSPENDED and RESUMED: what the move took. */
  readonly moved?: { bytes: number; seconds: number; processes: number };
}

const WARNINGS: ReadonlySet<ShardState> = new Set([
  'FAILED',
  'VANISHED',
  'SUSPEND_FAILED',
  'RESUME_FAILED',
]);

/**
 * Publishes shard state events. Timestamps strictly increase within this agent, so the
 * control plane (which applies an event only when it is newer than the last) never drops
 * the second of two events taken in the same millisecond.
 */
@Injectable()
export class StateReporter {
  private readonly logger: Logger;
  private lastAt = 0;

  constructor(
    @Inject(AGENT_CONFIG) private readonly config: AgentConfig,
    @Inject(AGENT_LINK) private readonly link: AgentLink,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'state' });
  }

  async report(
    shardId: string,
    teamId: string,
    state: ShardState,
    details: StateDetails = {},
  ): Promise<void> {
    const at = Math.max(Date.now(), this.lastAt + 1);
    this.lastAt = at;
    const event: ShardStateEvent = {
      protocolVersion: PROTOCOL_VERSION,
      hostId: this.config.hostId,
      eventId: randomUUID(),
      shardId,
      state,
      at: new Date(at).toISOString(),
      ...(details.containerId !== undefined ? { containerId: details.containerId } : {}),
      ...(details.exitCode !== undefined ? { exitCode: details.exitCode } : {}),
      ...(details.reason !== undefined ? { reason: protocolText(details.reason) } : {}),
      ...(details.progress !== undefined ? { progress: details.progress } : {}),
      ...(details.moved !== undefined ? { moved: details.moved } : {}),
    };
    const level = WARNINGS.has(state) ? 'warn' : 'info';
    // Progress is logged once, when it starts.
    if (details.progress === undefined || details.progress.completedBytes === 0) {
      this.logger[level]({ shardId, teamId, state, ...details }, `shard ${state.toLowerCase()}`);
    }
    try {
      await this.link.publishState(event);
    } catch (error) {
      // Lost events are repaired by the next reconcile and register.
      this.logger.warn({ err: error, shardId, state }, 'could not publish a shard state event');
    }
  }
}

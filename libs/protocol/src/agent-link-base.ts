import {
  heartbeatSchema,
  reconcileReplySchema,
  reconcileRequestSchema,
  registerReplySchema,
  registerRequestSchema,
  shardStateEventSchema,
  shardWakeSchema,
  type Heartbeat,
  type ReconcileReply,
  type ReconcileRequest,
  type RegisterReply,
  type RegisterRequest,
  type ShardStateEvent,
  type ShardWake,
} from './agent-messages.js';
import type { z } from 'zod';

import { encodeMessage } from './codec.js';
import { requestMessage } from './request.js';
import { agentSubjects, type AgentSubjects } from './subjects.js';

/**
 * What every agent-side link shares, whatever carries it (NATS between hosts, the one box's
 * in-process hub): the agent's messages encoded with this package's schemas on its own host's
 * subjects, the answers to its requests decoded and checked for its host (requestMessage), and
 * the listeners told when the link comes back. A subclass is the transport alone: it publishes
 * and requests one encoded message (`publish`, `send`, each throwing its transport's own error
 * when it cannot), takes commands, and calls `restored()` when its link is back.
 */
export abstract class AgentLinkBase {
  private readonly subjects: AgentSubjects;
  private readonly restoredListeners: (() => void)[] = [];

  protected constructor(readonly hostId: string) {
    this.subjects = agentSubjects(hostId);
  }

  register(request: RegisterRequest): Promise<RegisterReply> {
    return this.request(
      this.subjects.register,
      registerRequestSchema,
      request,
      registerReplySchema,
    );
  }

  reconcile(request: ReconcileRequest): Promise<ReconcileReply> {
    return this.request(
      this.subjects.reconcile,
      reconcileRequestSchema,
      request,
      reconcileReplySchema,
    );
  }

  async heartbeat(message: Heartbeat): Promise<void> {
    this.publish(this.subjects.heartbeat, encodeMessage(heartbeatSchema, message));
  }

  async publishState(event: ShardStateEvent): Promise<void> {
    this.publish(this.subjects.state, encodeMessage(shardStateEventSchema, event));
  }

  /** A process of a suspended shard asked for the GPU (docs/elastic.md). */
  async publishWake(wake: ShardWake): Promise<void> {
    this.publish(this.subjects.wake, encodeMessage(shardWakeSchema, wake));
  }

  /** Called after the link was lost and came back (the agent registers again). */
  onRestored(listener: () => void): void {
    this.restoredListeners.push(listener);
  }

  /** Tells the onRestored listeners that the link is back. */
  protected restored(): void {
    for (const listener of this.restoredListeners) listener();
  }

  private request<Q extends z.ZodType, R extends z.ZodType>(
    subject: string,
    requestSchema: Q,
    message: z.input<Q>,
    replySchema: R,
  ): Promise<z.output<R>> {
    const send = (to: string, data: string) => this.send(to, data);
    return requestMessage(send, subject, this.hostId, requestSchema, message, replySchema);
  }

  /** Sends one encoded message nobody answers; it may be lost. */
  protected abstract publish(subject: string, data: string): void;

  /** Sends one encoded request; resolves to the control plane's encoded answer. */
  protected abstract send(subject: string, data: string): Promise<Uint8Array | string>;
}

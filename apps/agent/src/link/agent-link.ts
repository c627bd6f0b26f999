import type {
  Command,
  CommandReply,
  Heartbeat,
  ReconcileReply,
  ReconcileRequest,
  RegisterReply,
  RegisterRequest,
  ShardStateEvent,
  ShardWake,
} from '@gpushards/protocol';

/** Answers one command; resolves to the reply the link sends back to the command's sender. */
export type CommandHandler = (command: Command) => Promise<CommandReply>;

/**
 * The agent's side of its conversation with the control plane, whatever carries it: NATS
 * between hosts (NatsAgentLink), or direct calls when the control plane and the agent share
 * one process (the one-box mode). Messages are the protocol's types, already valid: the
 * link decodes what arrives and answers undecodable commands itself (INVALID_COMMAND,
 * UNSUPPORTED_VERSION), so the agent only ever sees well-formed commands.
 *
 * Requests reject with LinkUnavailableError when nobody answers in time (the agent retries
 * later); publishes are fire-and-forget and may be lost (the next heartbeat or reconcile
 * repairs it).
 */
export interface AgentLink {
  /** Opens the link. Called once, before any other method. */
  connect(): Promise<void>;
  register(request: RegisterRequest): Promise<RegisterReply>;
  heartbeat(message: Heartbeat): Promise<void>;
  publishState(event: ShardStateEvent): Promise<void>;
  /** A process of a suspended shard asked for the GPU (docs/elastic.md): fire and forget. */
  publishWake(wake: ShardWake): Promise<void>;
  reconcile(request: ReconcileRequest): Promise<ReconcileReply>;
  /**
   * Starts delivering commands to `handler`. Commands may be handled concurrently; the
   * handler makes them idempotent by command id.
   */
  onCommand(handler: CommandHandler): Promise<void>;
  /** Called after the link was lost and came back: the agent registers again. */
  onRestored(listener: () => void): void;
  /** Stops delivering commands, flushes what was published and closes. */
  close(): Promise<void>;
}

/** Nobody answered a request (no control plane, or the link is down). */
export class LinkUnavailableError extends Error {
  override name = 'LinkUnavailableError';
}

/** Injection token of the AgentLink the agent uses. */
export const AGENT_LINK = Symbol('AgentLink');

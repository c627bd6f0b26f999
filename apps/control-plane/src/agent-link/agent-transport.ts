/**
 * What carries messages between the control plane and its agents, seen from the control
 * plane: NATS between hosts (NatsAgentTransport), or direct calls when an agent runs in the
 * same process (InProcessAgentHub). Both hand over the protocol's encoded bytes, so every
 * message is decoded and checked the same way whichever carries it.
 */
export interface AgentTransport {
  /**
   * Starts delivering agent messages (register, heartbeat, state, reconcile) to `handler`;
   * resolves once nothing sent from now on can be missed. A reply the handler returns goes
   * back to the requester; undefined sends none (a publish, or a request left unanswered).
   */
  listen(handler: AgentMessageHandler): Promise<void>;
  /** Stops delivering and waits for the messages being handled. */
  stopListening(): Promise<void>;
  /**
   * Sends one encoded command to the host's agent and resolves to its encoded reply. Rejects
   * with CommandNotDeliveredError when no agent answered within `timeoutMs` (the command
   * may still have been carried out: callers retry with the same command id).
   */
  sendCommand(hostId: string, data: string, timeoutMs: number): Promise<Uint8Array | string>;
}

/** One message from an agent: the subject it was sent on and its bytes, not yet decoded. */
export interface AgentMessage {
  readonly subject: string;
  readonly data: Uint8Array | string;
}

/** Handles one agent message; resolves to the encoded reply, if any. Never rejects. */
export type AgentMessageHandler = (message: AgentMessage) => Promise<string | undefined>;

/** No agent answered a command: nobody listens on its subject, or the answer came too late. */
export class CommandNotDeliveredError extends Error {
  override name = 'CommandNotDeliveredError';
}

import {
  AgentLinkBase,
  agentInboxPrefix,
  answerCommand,
  commandReplySchema,
  encodeMessage,
  errorMessage,
  hostSubjects,
  type NatsAuth,
} from '@gpushards/protocol';
import { connectNats } from '@gpushards/link';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';

import type { Logger } from '../logging/logger.js';
import { LinkUnavailableError, type AgentLink, type CommandHandler } from './agent-link.js';

export type { NatsAuth } from '@gpushards/protocol';

export interface NatsLinkOptions {
  /** nats://host:port, one or more. */
  servers: string[];
  /** None: the server allows anonymous connections (development only). */
  auth?: NatsAuth;
  /** How long register and reconcile wait for the control plane; default 10 s. */
  requestTimeoutMs?: number;
}

const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;

/**
 * The agent's link over NATS. Publishes on gpushards.agent.<host>.*, takes commands on
 * gpushards.host.<host>.cmd and answers each through its reply subject (allow_responses),
 * and receives its own replies under gpushards.inbox.<host> (the only inbox its user may
 * read), as libs/protocol's README describes.
 */
export class NatsAgentLink extends AgentLinkBase implements AgentLink {
  private connection: NatsConnection | undefined;
  private commands: Subscription | undefined;

  constructor(
    hostId: string,
    private readonly options: NatsLinkOptions,
    private readonly logger: Logger,
  ) {
    super(hostId);
  }

  async connect(): Promise<void> {
    this.connection = await connectNats(
      {
        servers: this.options.servers,
        auth: this.options.auth,
        name: `gpushards-agent-${this.hostId}`,
        inboxPrefix: agentInboxPrefix(this.hostId),
        onReconnect: () => this.restored(),
      },
      this.logger,
    );
  }

  async onCommand(handler: CommandHandler): Promise<void> {
    const connection = this.open();
    this.commands = connection.subscribe(hostSubjects(this.hostId).cmd, {
      callback: (error, msg) => {
        if (error) {
          this.logger.error({ err: error }, 'the command subscription failed');
          return;
        }
        void this.answer(msg, handler);
      },
    });
    // The server has the subscription once flush returns, so no command sent after
    // registering can be missed.
    await connection.flush();
  }

  async close(): Promise<void> {
    const connection = this.connection;
    this.connection = undefined;
    if (connection === undefined || connection.isClosed()) return;
    // drain: stop taking commands, let the ones in flight answer, flush publishes.
    await connection.drain();
  }

  private open(): NatsConnection {
    if (this.connection === undefined || this.connection.isClosed()) {
      throw new LinkUnavailableError('the NATS link is not connected');
    }
    return this.connection;
  }

  protected override publish(subject: string, data: string): void {
    this.open().publish(subject, data);
  }

  protected override async send(subject: string, data: string): Promise<Uint8Array> {
    try {
      const raw = await this.open().request(subject, data, {
        timeout: this.options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
      });
      return raw.data;
    } catch (error) {
      throw new LinkUnavailableError(
        `no answer from the control plane on ${subject}: ${errorMessage(error)}`,
        { cause: error },
      );
    }
  }

  private async answer(msg: Msg, handler: CommandHandler): Promise<void> {
    const reply = await answerCommand(this.hostId, msg.subject, msg.data, handler, (refusal) => {
      if (refusal.code === 'INTERNAL') {
        this.logger.error(
          { err: refusal.cause, commandId: refusal.commandId },
          'a command failed unexpectedly',
        );
      }
      this.logger.warn(
        { commandId: refusal.commandId, code: refusal.code, reason: refusal.message },
        'refused a command',
      );
    });
    if (!msg.reply) {
      this.logger.warn({ commandId: reply.commandId }, 'a command came without a reply subject');
      return;
    }
    try {
      msg.respond(encodeMessage(commandReplySchema, reply));
    } catch (error) {
      this.logger.error({ err: error, commandId: reply.commandId }, 'could not answer a command');
    }
  }
}

/** The nats.js authenticator for one of the ways an agent (or a test peer) logs in. */
export { natsAuthenticator } from '@gpushards/link';

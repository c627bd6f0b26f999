import { readFileSync } from 'node:fs';

import {
  PROTOCOL_VERSION,
  agentInboxPrefix,
  agentSubjects,
  checkSubjectHost,
  commandIdSchema,
  commandReplySchema,
  commandSchema,
  decodeMessage,
  encodeMessage,
  heartbeatSchema,
  hostSubjects,
  reconcileReplySchema,
  reconcileRequestSchema,
  registerReplySchema,
  registerRequestSchema,
  requestMessage,
  shardStateEventSchema,
  type AgentSubjects,
  type NatsAuth,
  type CommandReply,
  type Heartbeat,
  type ReconcileReply,
  type ReconcileRequest,
  type RegisterReply,
  type RegisterRequest,
  type ShardStateEvent,
} from '@gpushards/protocol';
import {
  connect,
  credsAuthenticator,
  nkeyAuthenticator,
  usernamePasswordAuthenticator,
  type Authenticator,
  type Msg,
  type NatsConnection,
  type Subscription,
} from '@nats-io/transport-node';
import type { z } from 'zod';

import { errorMessage, protocolText } from '../common/text.js';
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
export class NatsAgentLink implements AgentLink {
  private readonly subjects: AgentSubjects;
  private connection: NatsConnection | undefined;
  private commands: Subscription | undefined;
  private readonly restoredListeners: (() => void)[] = [];

  constructor(
    private readonly hostId: string,
    private readonly options: NatsLinkOptions,
    private readonly logger: Logger,
  ) {
    this.subjects = agentSubjects(hostId);
  }

  async connect(): Promise<void> {
    const authenticator = natsAuthenticator(this.options.auth);
    try {
      this.connection = await connect({
        servers: this.options.servers,
        name: `gpushards-agent-${this.hostId}`,
        inboxPrefix: agentInboxPrefix(this.hostId),
        maxReconnectAttempts: -1,
        ...(authenticator ? { authenticator } : {}),
      });
    } catch (error) {
      throw new Error(
        `cannot connect to NATS at ${this.options.servers.join(', ')}: ${errorMessage(error)}`,
        { cause: error },
      );
    }
    void this.watchStatus(this.connection);
    this.logger.info({ servers: this.options.servers }, 'connected to NATS');
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
    this.open().publish(this.subjects.heartbeat, encodeMessage(heartbeatSchema, message));
  }

  async publishState(event: ShardStateEvent): Promise<void> {
    this.open().publish(this.subjects.state, encodeMessage(shardStateEventSchema, event));
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

  onRestored(listener: () => void): void {
    this.restoredListeners.push(listener);
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

  private request<Q extends z.ZodType, R extends z.ZodType>(
    subject: string,
    requestSchema: Q,
    message: z.input<Q>,
    replySchema: R,
  ): Promise<z.output<R>> {
    const send = async (to: string, data: string): Promise<Uint8Array> => {
      try {
        const raw = await this.open().request(to, data, {
          timeout: this.options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
        });
        return raw.data;
      } catch (error) {
        throw new LinkUnavailableError(
          `no answer from the control plane on ${to}: ${errorMessage(error)}`,
          { cause: error },
        );
      }
    };
    return requestMessage(send, subject, this.hostId, requestSchema, message, replySchema);
  }

  private async answer(msg: Msg, handler: CommandHandler): Promise<void> {
    const reply = await this.commandReply(msg, handler);
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

  private async commandReply(msg: Msg, handler: CommandHandler): Promise<CommandReply> {
    const refuse = (commandId: string | null, code: string, message: string): CommandReply => {
      this.logger.warn({ commandId, code, reason: message }, 'refused a command');
      return {
        protocolVersion: PROTOCOL_VERSION,
        hostId: this.hostId,
        commandId,
        ok: false,
        error: { code, message: protocolText(message) },
      };
    };
    const decoded = decodeMessage(commandSchema, msg.data);
    if (!decoded.ok) {
      const code =
        decoded.error.code === 'UNSUPPORTED_VERSION' ? 'UNSUPPORTED_VERSION' : 'INVALID_COMMAND';
      return refuse(readCommandId(msg.data), code, decoded.error.message);
    }
    const command = decoded.message;
    const bound = checkSubjectHost(msg.subject, command);
    if (!bound.ok) return refuse(command.commandId, 'WRONG_HOST', bound.error.message);
    try {
      return await handler(command);
    } catch (error) {
      this.logger.error(
        { err: error, commandId: command.commandId },
        'a command failed unexpectedly',
      );
      return refuse(command.commandId, 'INTERNAL', errorMessage(error));
    }
  }

  private async watchStatus(connection: NatsConnection): Promise<void> {
    for await (const status of connection.status()) {
      switch (status.type) {
        case 'disconnect':
          this.logger.warn({ server: status.server }, 'lost the NATS connection; reconnecting');
          break;
        case 'reconnect':
          this.logger.info({ server: status.server }, 'NATS connection restored');
          for (const listener of this.restoredListeners) listener();
          break;
        case 'error':
          // Permission violations arrive here: a subject this host's user may not use.
          this.logger.error({ err: status.error }, 'NATS reported an error');
          break;
        default:
          break;
      }
    }
  }
}

/** The nats.js authenticator for one of the ways an agent (or a test peer) logs in. */
export function natsAuthenticator(auth: NatsAuth | undefined): Authenticator | undefined {
  if (auth === undefined) return undefined;
  switch (auth.kind) {
    case 'password':
      return usernamePasswordAuthenticator(auth.user, auth.password);
    case 'nkey':
      return nkeyAuthenticator(
        new TextEncoder().encode(readSecret(auth.seedFile, 'NATS nkey seed').trim()),
      );
    case 'creds':
      return credsAuthenticator(
        new TextEncoder().encode(readSecret(auth.credsFile, 'NATS credentials')),
      );
  }
}

function readSecret(path: string, what: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    throw new Error(`cannot read the ${what} file ${path}: ${errorMessage(error)}`, {
      cause: error,
    });
  }
}

/** The command id of an undecodable command, when it has a readable one, for its error reply. */
function readCommandId(data: Uint8Array): string | null {
  try {
    const value: unknown = JSON.parse(new TextDecoder().decode(data));
    const id = (value as { commandId?: unknown } | null)?.commandId;
    return commandIdSchema.safeParse(id).success ? (id as string) : null;
  } catch {
    return null;
  }
}

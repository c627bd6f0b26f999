import {
  CONTROL_PLANE_QUEUE_GROUP,
  CONTROL_PLANE_SUBSCRIPTIONS,
  errorMessage,
  hostSubjects,
  type NatsAuth,
} from '@gpushards/protocol';
import { connectNats } from '@gpushards/link';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from '../logging/logger.js';
import {
  CommandNotDeliveredError,
  type AgentMessageHandler,
  type AgentTransport,
} from './agent-transport.js';

/** How the control plane logs in to NATS (deploy/nats/generate-config.mjs writes each). */
export type { NatsAuth } from '@gpushards/protocol';

export interface NatsConnectionOptions {
  /** nats://host:port, one or more. */
  readonly servers: readonly string[];
  /** None: the server allows anonymous connections (development only). */
  readonly auth?: NatsAuth;
  /**
   * deploy/nats --auth jwt's credentials/control-plane-revocation.json: removeHost revokes the
   * host's NATS user (NatsHostCredentials). None: nkey or password users, not revoked here.
   */
  readonly revocationFile?: string;
}

/**
 * The control plane's NATS connection: takes agent messages on CONTROL_PLANE_SUBSCRIPTIONS
 * in CONTROL_PLANE_QUEUE_GROUP (each message goes to one of the replicas), answers requests
 * through their reply subject, and sends commands as requests on gpushards.host.<h>.cmd.
 * Replies to those arrive on _INBOX.>, which only the control-plane user may read.
 */
export class NatsAgentTransport implements AgentTransport {
  private subscriptions: Subscription[] = [];
  private readonly inFlight = new Set<Promise<void>>();

  private constructor(
    private readonly connection: NatsConnection,
    private readonly logger: Logger,
  ) {}

  /** Connects (reconnecting for ever after a loss); rejects when no server takes the connection. */
  static async connect(
    options: NatsConnectionOptions,
    logger: Logger,
  ): Promise<NatsAgentTransport> {
    const connection = await connectNats(
      { servers: options.servers, auth: options.auth, name: 'gpushards-control-plane' },
      logger,
    );
    return new NatsAgentTransport(connection, logger);
  }

  async listen(handler: AgentMessageHandler): Promise<void> {
    for (const subject of Object.values(CONTROL_PLANE_SUBSCRIPTIONS)) {
      const subscription = this.connection.subscribe(subject, {
        queue: CONTROL_PLANE_QUEUE_GROUP,
        callback: (error, msg) => {
          if (error) {
            this.logger.error({ err: error, subject }, 'an agent subscription failed');
            return;
          }
          this.track(this.deliver(msg, handler));
        },
      });
      this.subscriptions.push(subscription);
    }
    // The server has the subscriptions once flush returns.
    await this.connection.flush();
  }

  async stopListening(): Promise<void> {
    const subscriptions = this.subscriptions;
    this.subscriptions = [];
    if (!this.connection.isClosed()) {
      await Promise.allSettled(subscriptions.map((subscription) => subscription.drain()));
    }
    await Promise.allSettled([...this.inFlight]);
  }

  async sendCommand(hostId: string, data: string, timeoutMs: number): Promise<Uint8Array> {
    const subject = hostSubjects(hostId).cmd;
    try {
      const reply = await this.connection.request(subject, data, { timeout: timeoutMs });
      return reply.data;
    } catch (error) {
      // Timeouts, no responders (no agent of that host connected), a lost connection.
      throw new CommandNotDeliveredError(`no answer on ${subject}: ${errorMessage(error)}`, {
        cause: error,
      });
    }
  }

  /** Flushes what is pending and closes the connection. */
  async close(): Promise<void> {
    if (this.connection.isClosed()) return;
    await this.connection.drain();
  }

  private async deliver(msg: Msg, handler: AgentMessageHandler): Promise<void> {
    const reply = await handler({ subject: msg.subject, data: msg.data });
    if (reply === undefined || !msg.reply) return;
    try {
      msg.respond(reply);
    } catch (error) {
      this.logger.warn({ err: error, subject: msg.subject }, 'could not answer an agent request');
    }
  }

  private track(handling: Promise<void>): void {
    this.inFlight.add(handling);
    void handling.finally(() => this.inFlight.delete(handling));
  }
}

import pg from 'pg';
import type { Logger } from '../logging/logger.js';

const RECONNECT_DELAY_MS = 1_000;

export interface ListeningConnectionOptions {
  readonly url: string;
  readonly channel: string;
  /** Who listens, for the log ("shard event relay"). */
  readonly name: string;
  /** What goes missing while the connection is down, for the warning. */
  readonly whileDown: string;
  readonly onNotification: (payload: string | undefined) => void;
  readonly logger: Logger;
}

/**
 * A PostgreSQL connection of its own that LISTENs on one channel (a pooled connection would
 * drop the LISTEN when returned). Lost, it is opened again every second until closed;
 * notifications sent meanwhile are missed, which its owner accounts for.
 */
export class ListeningConnection {
  private client: pg.Client | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly options: ListeningConnectionOptions) {}

  /** The connection while it is up (to NOTIFY on), else undefined. */
  get current(): pg.Client | undefined {
    return this.client;
  }

  /** Connects and listens; throws when the database cannot be reached at all. */
  async open(): Promise<void> {
    const { url, channel, onNotification, logger, name, whileDown } = this.options;
    const client = new pg.Client({ connectionString: url });
    const lost = (error?: Error) => {
      if (this.client !== client) return;
      this.client = undefined;
      client.end().catch(() => undefined);
      if (this.closed) return;
      logger.warn({ err: error }, `${name} lost its database connection; ${whileDown}`);
      this.reconnectTimer = setTimeout(() => this.reconnect(), RECONNECT_DELAY_MS);
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (message) => {
      if (message.channel === channel) onNotification(message.payload);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${channel}`);
    } catch (error) {
      client.removeAllListeners('end');
      await client.end().catch(() => undefined);
      throw error;
    }
    this.client = client;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private reconnect(): void {
    if (this.closed) return;
    const { logger, name } = this.options;
    this.open().then(
      () => logger.info(`${name} connected again`),
      (error: unknown) => {
        logger.warn({ err: error }, `${name} could not connect; trying again`);
        this.reconnectTimer = setTimeout(() => this.reconnect(), RECONNECT_DELAY_MS);
      },
    );
  }
}

import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { PrismaService } from '../database/index.js';
import { ListeningConnection } from '../database/listening-connection.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';
import { ShardEventBus, type ShardStateChange } from './shard-event-bus.js';
import { noticesFrom, noticesOf, relayedNoticesSchema } from './shard-event-payloads.js';

/** The PostgreSQL channel every control plane of one database listens on. */
export const SHARD_EVENTS_CHANNEL = 'gpushards_shard_events';

/** NOTIFY refuses payloads of 8,000 bytes and more; a message is cut well before. */
export const MAX_NOTIFY_PAYLOAD_BYTES = 7_000;

/**
 * How long a change waits for others before they are sent in one NOTIFY. Each NOTIFY is a
 * transaction of its own with a durable commit and a wake-up of every replica: sent for each
 * tick of the event loop they were 1.6 per createShard at 200 createShard/s with 1,000 hosts
 * (its PLACED, STARTING and RUNNING), 320 commits a second; gathered over this window, a
 * replica sends at most 50 a second whatever the rate.
 */
export const RELAY_GATHER_MS = 20;

const relayedChangeSchema = relayedNoticesSchema.extend({
  id: z.uuid(),
  /** The stored event's id (ShardEvent.id), so a client can tell it from a page of history. */
  eventId: z
    .string()
    .regex(/^\d{1,19}$/)
    .optional(),
  previousState: z.string().max(16).nullable(),
  state: z.string().max(16),
  at: z.iso.datetime(),
});

const relayedMessageSchema = z.object({
  origin: z.string().max(64),
  changes: z.array(relayedChangeSchema).max(1_000),
});

type RelayedChange = z.infer<typeof relayedChangeSchema>;

/**
 * Shard state changes between control planes that share one PostgreSQL database, so that a
 * shardEvents subscriber hears every change of its team whichever replica made it (an agent's
 * event or a createShard may reach any of them).
 *
 * What this process publishes on the bus is sent on, after its transaction committed, by
 * NOTIFY on SHARD_EVENTS_CHANNEL: shard ids and states only (a payload must stay under 8 kB),
 * the changes of RELAY_GATHER_MS in one message. Each other replica LISTENs on its own
 * connection and, when it has subscribers, reads those shards and delivers the changes; the
 * shard in such an event is the row as read then, which may already be past the change.
 * Messages from this process are ignored (its subscribers heard them first hand). A replica
 * that is disconnected from the database misses what is sent meanwhile (it reconnects every
 * second); subscriptions are live notifications, the shards query is the record. The embedded
 * database serves one process, so there is nothing to relay.
 */
@Injectable()
export class ShardEventRelay implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger: Logger;
  /** Tells this process's messages from other replicas'. */
  private readonly origin = randomUUID();
  private connection: ListeningConnection | undefined;
  private outgoing: RelayedChange[] = [];
  /**
   * Changes gathered for RELAY_GATHER_MS, then sent; one NOTIFY at a time on the connection,
   * changes queued meanwhile go in the next.
   */
  private sending: Promise<void> | undefined;
  /** Incoming messages are delivered one after the other, in the order they came. */
  private delivering: Promise<void> = Promise.resolve();

  constructor(
    @Inject(CONTROL_PLANE_CONFIG) private readonly config: ControlPlaneConfig,
    private readonly bus: ShardEventBus,
    private readonly prisma: PrismaService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shard-event-relay' });
  }

  async onApplicationBootstrap(): Promise<void> {
    const url = this.config.database.url;
    if (url === undefined) return;
    this.connection = new ListeningConnection({
      url,
      channel: SHARD_EVENTS_CHANNEL,
      name: 'shard event relay',
      whileDown: 'other replicas miss changes until it is back',
      onNotification: (payload) => {
        this.delivering = this.delivering.then(() => this.receive(payload));
      },
      logger: this.logger,
    });
    this.bus.forwardTo((change) => this.send(change));
    await this.connection.open();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.connection?.close();
    await this.delivering;
  }

  private send(change: ShardStateChange): void {
    this.outgoing.push({
      id: change.shard.id,
      ...(change.eventId === undefined ? {} : { eventId: change.eventId }),
      previousState: change.previousState,
      state: change.state,
      at: change.at.toISOString(),
      ...noticesOf(change),
    });
    if (this.sending !== undefined) return;
    this.sending = new Promise<void>((resolve) => setTimeout(resolve, RELAY_GATHER_MS))
      .then(() => this.flush())
      .finally(() => {
        this.sending = undefined;
      });
  }

  /** Sends what is queued, and what queues meanwhile, until nothing is left. */
  private async flush(): Promise<void> {
    while (this.outgoing.length > 0) {
      const changes = this.outgoing;
      this.outgoing = [];
      const client = this.connection?.current;
      if (client === undefined) return;
      try {
        for (const payload of payloadsOf(this.origin, changes)) {
          await client.query('SELECT pg_notify($1, $2)', [SHARD_EVENTS_CHANNEL, payload]);
        }
      } catch (error) {
        this.logger.warn({ err: error }, 'shard state changes not sent to other replicas');
      }
    }
  }

  /** Whether the payload names this process as its origin (payloadsOf writes origin first). */
  private isOwn(payload: string | undefined): boolean {
    return payload?.startsWith(`{"origin":${JSON.stringify(this.origin)},`) === true;
  }

  private async receive(payload: string | undefined): Promise<void> {
    // Nobody here to tell, or this process's own message (its subscribers heard it first
    // hand): not worth validating. Every replica receives every other's NOTIFYs.
    if (this.bus.subscriberCount === 0 || this.isOwn(payload)) return;
    let message: z.infer<typeof relayedMessageSchema>;
    try {
      message = relayedMessageSchema.parse(JSON.parse(payload ?? ''));
    } catch (error) {
      this.logger.warn(
        { err: error, payload: payload?.slice(0, 200) },
        `ignored a malformed message on ${SHARD_EVENTS_CHANNEL}`,
      );
      return;
    }
    try {
      const ids = [...new Set(message.changes.map((change) => change.id))];
      const rows = await this.prisma.$queryRaw<ShardRecord[]>`
        SELECT ${SHARD_COLUMNS} FROM shard WHERE id = ANY(${ids}::uuid[])`;
      const shards = new Map(rows.map((row) => [row.id, row]));
      for (const change of message.changes) {
        const shard = shards.get(change.id);
        if (shard === undefined) continue;
        this.bus.deliver({
          shard,
          ...(change.eventId === undefined ? {} : { eventId: change.eventId }),
          previousState: change.previousState,
          state: change.state,
          at: new Date(change.at),
          ...noticesFrom(change),
        });
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'shard state changes from another replica not delivered');
    }
  }
}

/** The changes as few NOTIFY payloads as fit under MAX_NOTIFY_PAYLOAD_BYTES, in order. */
export function payloadsOf(origin: string, changes: readonly RelayedChange[]): string[] {
  const payloads: string[] = [];
  let batch: RelayedChange[] = [];
  let size = 0;
  const envelope = Buffer.byteLength(JSON.stringify({ origin, changes: [] }));
  for (const change of changes) {
    const changeSize = Buffer.byteLength(JSON.stringify(change)) + 1;
    if (batch.length > 0 && envelope + size + changeSize > MAX_NOTIFY_PAYLOAD_BYTES) {
      payloads.push(JSON.stringify({ origin, changes: batch }));
      batch = [];
      size = 0;
    }
    batch.push(change);
    size += changeSize;
  }
  if (batch.length > 0) payloads.push(JSON.stringify({ origin, changes: batch }));
  return payloads;
}

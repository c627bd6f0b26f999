import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { IdleActionKind } from '../compute/idle.model.js';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { CapPolicy, PrismaService } from '../database/index.js';
import { ListeningConnection } from '../database/listening-connection.js';
import type { CapViolation } from '../fence/cap-policy.model.js';
import type { UngovernedCompute } from '../fence/ungoverned-compute.model.js';
import { sizeOf } from '../graphql/size.model.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';
import { ShardEventBus, type ShardStateChange } from './shard-event-bus.js';

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

const relayedViolationSchema = z.object({
  gpuUuid: z.string().max(64),
  realBytes: z.number().int().min(0),
  capBytes: z.number().int().min(0),
  toleranceBytes: z.number().int().min(0),
  action: z.enum(['KILL', 'STOP', 'REPORT']),
  pid: z.number().int(),
  processBytes: z.number().int().min(0),
  killedPids: z.array(z.number().int()).max(64),
  error: z.string().max(512).nullable(),
});

const relayedUngovernedSchema = z.object({
  gpuUuid: z.string().max(64),
  action: z.enum(['KILL', 'STOP', 'REPORT']),
  pid: z.number().int(),
  smPercent: z.number().min(0).max(100),
  pids: z.array(z.number().int()).max(64),
  busyPercent: z.number().min(0).max(100),
  samples: z.number().int().min(0),
  busySamples: z.number().int().min(0),
  thresholdPercent: z.number().min(0).max(100),
  windowSeconds: z.number().min(0),
  lastKernelAt: z.iso.datetime().nullable(),
  killedPids: z.array(z.number().int()).max(64),
  error: z.string().max(512).nullable(),
  message: z.string().max(512),
});

const relayedChangeSchema = z.object({
  id: z.uuid(),
  previousState: z.string().max(16).nullable(),
  state: z.string().max(16),
  at: z.iso.datetime(),
  violation: relayedViolationSchema.optional(),
  ungovernedCompute: relayedUngovernedSchema.optional(),
  idle: z
    .object({
      action: z.enum(['REPORT', 'STOP']),
      idleSince: z.iso.datetime(),
      idleSeconds: z.number().min(0),
    })
    .optional(),
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
      previousState: change.previousState,
      state: change.state,
      at: change.at.toISOString(),
      ...(change.violation ? { violation: relayedViolationOf(change.violation) } : {}),
      ...(change.ungovernedCompute
        ? { ungovernedCompute: relayedUngovernedOf(change.ungovernedCompute) }
        : {}),
      ...(change.idle
        ? {
            idle: {
              action: change.idle.action,
              idleSince: change.idle.idleSince.toISOString(),
              idleSeconds: change.idle.idleSeconds,
            },
          }
        : {}),
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
          previousState: change.previousState,
          state: change.state,
          at: new Date(change.at),
          ...(change.violation ? { violation: violationOf(change.violation) } : {}),
          ...(change.ungovernedCompute
            ? { ungovernedCompute: ungovernedOf(change.ungovernedCompute) }
            : {}),
          ...(change.idle
            ? {
                idle: {
                  action: change.idle.action as IdleActionKind,
                  idleSince: new Date(change.idle.idleSince),
                  idleSeconds: change.idle.idleSeconds,
                },
              }
            : {}),
        });
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'shard state changes from another replica not delivered');
    }
  }
}

type RelayedViolation = z.infer<typeof relayedViolationSchema>;

function relayedViolationOf(violation: CapViolation): RelayedViolation {
  return {
    gpuUuid: violation.gpuUuid,
    realBytes: violation.real.bytes,
    capBytes: violation.cap.bytes,
    toleranceBytes: violation.tolerance.bytes,
    action: violation.action,
    pid: violation.pid,
    processBytes: violation.processMemory.bytes,
    // A NOTIFY payload is small: the first processes killed are enough for other replicas.
    killedPids: violation.killedPids.slice(0, 64),
    error: violation.error?.slice(0, 512) ?? null,
  };
}

function violationOf(relayed: RelayedViolation): CapViolation {
  return {
    gpuUuid: relayed.gpuUuid,
    real: sizeOf(relayed.realBytes),
    cap: sizeOf(relayed.capBytes),
    tolerance: sizeOf(relayed.toleranceBytes),
    action: relayed.action as CapPolicy,
    pid: relayed.pid,
    processMemory: sizeOf(relayed.processBytes),
    killedPids: relayed.killedPids,
    error: relayed.error,
  };
}

type RelayedUngoverned = z.infer<typeof relayedUngovernedSchema>;

function relayedUngovernedOf(finding: UngovernedCompute): RelayedUngoverned {
  return {
    ...finding,
    // A NOTIFY payload is small: the first processes are enough for other replicas.
    pids: finding.pids.slice(0, 64),
    killedPids: finding.killedPids.slice(0, 64),
    lastKernelAt: finding.lastKernelAt?.toISOString() ?? null,
    error: finding.error?.slice(0, 512) ?? null,
    message: finding.message.slice(0, 512),
  };
}

function ungovernedOf(relayed: RelayedUngoverned): UngovernedCompute {
  return {
    ...relayed,
    action: relayed.action as CapPolicy,
    lastKernelAt: relayed.lastKernelAt === null ? null : new Date(relayed.lastKernelAt),
  };
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

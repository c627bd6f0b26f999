import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { z } from 'zod';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';

/**
 * The session advisory lock that makes a replica the admitter. Held on the lease's own
 * connection for as long as the replica is; PostgreSQL releases it when that session ends (a
 * replica killed, its connection lost), and the next replica waiting for it gets it at once.
 */
export const ADMITTER_LOCK = 0x67707361; // "gpsa"

/** Followers tell the admitter here what their commits changed in the queue. */
export const QUEUE_WAKE_CHANNEL = 'gpushards_queue_wake';

/** The admitter's connection's application_name: `gpushards-admitter:<pid>` (tests find it so). */
export const ADMITTER_APPLICATION_NAME = 'gpushards-admitter';

/** A NOTIFY payload must stay under 8,000 bytes; ids are cut into messages well below. */
const MAX_IDS_PER_MESSAGE = 150;

const RECONNECT_DELAY_MS = 1_000;

/**
 * How often a follower asks for the lock again. It asks (`pg_try_advisory_lock`) rather than
 * waits in `pg_advisory_lock`: a statement that waits holds its snapshot, and a follower waiting
 * for as long as the admitter lives kept PostgreSQL from removing any dead row version all that
 * time (22 minutes of heartbeats' GPU updates in one fleet run: 775,785 dead versions of 8,000
 * rows). A take-over waits at most this long more than PostgreSQL's own notice of the dead
 * session.
 */
const LEASE_POLL_MS = 250;

/** What a commit changed for the queue. */
export interface QueueChange {
  /** Shards that became PENDING (queued, requeued). */
  readonly entered: readonly string[];
  /** Shards that stopped being PENDING (placed, cancelled, expired). */
  readonly left: readonly string[];
  /** A reservation was released or a host came online. */
  readonly freed: boolean;
}

const wakeSchema = z.object({
  origin: z.string().max(64),
  entered: z.array(z.uuid()).max(MAX_IDS_PER_MESSAGE),
  left: z.array(z.uuid()).max(MAX_IDS_PER_MESSAGE),
  freed: z.boolean(),
});

export interface LeaseListener {
  /** This replica is the admitter now (its queue memory must be read whole). */
  acquired(): void;
  /** It no longer is (its connection was lost). */
  lost(): void;
  /** A follower's commit changed the queue. */
  wake(change: QueueChange): void;
}

/**
 * Which replica runs admission passes: the one holding ADMITTER_LOCK. Every replica asks for
 * the lock on a connection of its own every LEASE_POLL_MS until it gets it; the holder
 * LISTENs on QUEUE_WAKE_CHANNEL, and the others forward what their commits changed there
 * (`forward`), so a wake-up anywhere reaches the admitter. The order matters for take-over: the
 * new admitter LISTENs before it reads the queue whole, so nothing committed after its read is
 * missed, and nothing committed before is missed by the read.
 *
 * The embedded database serves one process: it is always the admitter.
 */
@Injectable()
export class AdmissionLease implements OnApplicationShutdown {
  private readonly logger: Logger;
  private readonly origin = randomUUID();
  private client: pg.Client | undefined;
  private listener: LeaseListener | undefined;
  private holding = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    @Inject(CONTROL_PLANE_CONFIG) private readonly config: ControlPlaneConfig,
    private readonly prisma: PrismaService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'admission-lease' });
  }

  /** Whether this replica is the admitter now. */
  get held(): boolean {
    return this.holding;
  }

  /** Whether other replicas may share the database (PostgreSQL). */
  get shared(): boolean {
    return this.config.database.url !== undefined;
  }

  start(listener: LeaseListener): void {
    this.listener = listener;
    if (!this.shared) {
      this.holding = true;
      listener.acquired();
      return;
    }
    this.campaign();
  }

  async onApplicationShutdown(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.pollTimer);
    const client = this.client;
    this.client = undefined;
    this.holding = false;
    await client?.end().catch(() => undefined);
  }

  /** Sends what a commit of this follower changed to the admitter; logs a failure. */
  async forward(change: QueueChange): Promise<void> {
    const messages: QueueChange[] = [];
    const { entered, left } = change;
    for (
      let i = 0;
      i === 0 || i < Math.max(entered.length, left.length);
      i += MAX_IDS_PER_MESSAGE
    ) {
      messages.push({
        entered: entered.slice(i, i + MAX_IDS_PER_MESSAGE),
        left: left.slice(i, i + MAX_IDS_PER_MESSAGE),
        freed: change.freed,
      });
    }
    try {
      for (const message of messages) {
        const payload = JSON.stringify({ origin: this.origin, ...message });
        await this.prisma.$executeRaw`SELECT pg_notify(${QUEUE_WAKE_CHANNEL}, ${payload})`;
      }
    } catch (error) {
      this.logger.warn(
        { err: error },
        'a queue change was not sent to the admitter; its periodic whole read will see it',
      );
    }
  }

  /** Connects and waits for the lock; on any failure, tries again a second later. */
  private campaign(): void {
    if (this.closed) return;
    const client = new pg.Client({
      connectionString: this.config.database.url,
      application_name: `${ADMITTER_APPLICATION_NAME}:${process.pid}`,
      keepAlive: true,
    });
    this.client = client;
    let ended = false;
    const lost = (error?: Error) => {
      if (ended) return;
      ended = true;
      if (this.client === client) this.client = undefined;
      client.end().catch(() => undefined);
      const was = this.holding;
      this.holding = false;
      if (this.closed) return;
      if (was) {
        this.logger.warn({ err: error }, 'admission lease lost with its connection');
        this.listener?.lost();
      } else {
        this.logger.warn({ err: error }, 'admission lease: no database connection; trying again');
      }
      this.reconnectTimer = setTimeout(() => this.campaign(), RECONNECT_DELAY_MS);
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (message) => {
      if (message.channel !== QUEUE_WAKE_CHANNEL || !this.holding) return;
      this.receive(message.payload);
    });
    (async () => {
      await client.connect();
      for (let asked = 0; !(await this.tryLock(client)); asked++) {
        if (ended || this.closed) return;
        if (asked === 0) {
          this.logger.info(`another replica is the admitter; asking every ${LEASE_POLL_MS} ms`);
        }
        await new Promise((resolve) => {
          this.pollTimer = setTimeout(resolve, LEASE_POLL_MS);
        });
        if (ended || this.closed) return;
      }
      await client.query(`LISTEN ${QUEUE_WAKE_CHANNEL}`);
      if (ended || this.closed) return;
      this.holding = true;
      this.logger.info('this replica is the admitter');
      this.listener?.acquired();
    })().catch((error: unknown) => lost(error as Error));
  }

  private async tryLock(client: pg.Client): Promise<boolean> {
    const { rows } = await client.query<{ got: boolean }>(
      'SELECT pg_try_advisory_lock($1::bigint) AS got',
      [ADMITTER_LOCK],
    );
    return rows[0]?.got === true;
  }

  private receive(payload: string | undefined): void {
    let message: z.infer<typeof wakeSchema>;
    try {
      message = wakeSchema.parse(JSON.parse(payload ?? ''));
    } catch (error) {
      this.logger.warn(
        { err: error, payload: payload?.slice(0, 200) },
        `ignored a malformed message on ${QUEUE_WAKE_CHANNEL}`,
      );
      return;
    }
    if (message.origin === this.origin) return;
    this.listener?.wake(message);
  }
}

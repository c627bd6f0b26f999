import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import {
  DEFAULT_STUCK_SECONDS,
  shortestStuckSeconds,
  stuckShards,
  TRANSITIONAL_STATES,
  type StuckSeconds,
  type StuckShard,
} from '@gpushards/limits';
import { Gauge, Registry } from 'prom-client';
import { AuditService } from '../audit/audit.service.js';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { tryLaunchSpecOf } from '../shards/launch-spec.js';
import {
  InjectShardCommands,
  type ShardCommands,
  type SuspendCause,
} from '../shards/shard-commands.js';
import { DEFAULT_STOP_GRACE_SECONDS } from '../shards/shard-mutations.service.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';

/** How often to look: a quarter of the shortest limit, within 1 to 30 seconds. */
export function stuckSweepIntervalMs(limits: StuckSeconds): number | undefined {
  const shortest = shortestStuckSeconds(limits);
  if (shortest === undefined) return undefined;
  return Math.min(30_000, Math.max(1_000, (shortest * 1000) / 4));
}

type Candidate = ShardRecord & { gpuUuids: string[] | null };

/** At start, hosts asked to reconcile at a time, and the pause between such steps. */
const RECONCILE_ASKS_PER_STEP = 100;
const RECONCILE_ASK_STEP_MS = 250;

/**
 * Nothing stuck in silence: a shard that stays PENDING, PLACED, STARTING or STOPPING past its
 * limit (GPUSHARDS_STUCK_SECONDS, libs/limits DEFAULT_STUCK_SECONDS) gets a `shard.stuck`
 * audit event and a warning log line with its shard, team and host ids, once per stay; it is
 * counted in gpushards_shards_stuck{state}; and reconciliation acts on it: the launch or stop
 * is sent to its agent again (both idempotent there; a container created and never started is
 * replaced), at most once per limit. Runs when the control plane starts and then on an
 * interval; tests call `sweep(at)`.
 */
@Injectable()
export class StuckShardSweeper implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger: Logger;
  private readonly limits: StuckSeconds;
  private readonly gauge: Gauge<'state'>;
  /** Shard id → the version it was found stuck at, and when it was last acted on. */
  private readonly known = new Map<string, { version: number; actedAt: number }>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private closing = false;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    @InjectShardCommands() private readonly commands: ShardCommands,
    @Inject(CONTROL_PLANE_CONFIG) config: ControlPlaneConfig,
    registry: Registry,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'lifecycle' });
    this.limits = config.stuckSeconds ?? DEFAULT_STUCK_SECONDS;
    this.gauge = new Gauge({
      name: 'gpushards_shards_stuck',
      help: 'Shards in a transitional state past its limit (GPUSHARDS_STUCK_SECONDS), by state.',
      labelNames: ['state'],
      registers: [registry],
    });
    for (const state of TRANSITIONAL_STATES) this.gauge.set({ state }, 0);
  }

  onApplicationBootstrap(): void {
    // At once, not a period later: commands committed but lost when a control plane died are
    // sent again as it starts.
    this.running = this.resendOnStart()
      .catch((error: unknown) => this.logger.error({ err: error }, 'resending on start failed'))
      .finally(() => {
        this.running = undefined;
      });
    const interval = stuckSweepIntervalMs(this.limits);
    if (interval === undefined) return;
    this.timer = setInterval(() => this.tick(), interval);
    this.timer.unref();
  }

  async onModuleDestroy(): Promise<void> {
    this.closing = true;
    clearInterval(this.timer);
    await this.running;
  }

  private tick(): void {
    if (this.running !== undefined) return;
    this.running = this.sweep()
      .catch((error: unknown) => this.logger.error({ err: error }, 'stuck-shard sweep failed'))
      .finally(() => {
        this.running = undefined;
      });
  }

  /**
   * Sends the launch of every PLACED or STARTING shard and the stop of every STOPPING shard of
   * a host that is not OFFLINE to its agent again (idempotent there; an agent that has the
   * shard running or stopped already tells its state again), then asks every such host to
   * reconcile now. Returns how many commands were sent again.
   */
  async resendOnStart(): Promise<number> {
    const shards = await this.prisma.$queryRaw<Candidate[]>`
      SELECT ${SHARD_COLUMNS},
             (SELECT array_agg(held.gpu_uuid ORDER BY gpu.index, held.gpu_uuid)
                FROM shard_gpu held JOIN gpu ON gpu.uuid = held.gpu_uuid
               WHERE held.shard_id = shard.id AND held.released_at IS NULL) AS "gpuUuids"
        FROM shard JOIN host ON host.id = shard.host_id
       WHERE shard.state IN ('PLACED', 'STARTING', 'SUSPENDING', 'RESUMING', 'STOPPING')
         AND host.state <> 'OFFLINE'
       ORDER BY shard.updated_at, shard.id
       LIMIT 10000`;
    for (const shard of shards) {
      this.act(
        shard,
        shard.state === 'STOPPING'
          ? 'resend-stop'
          : shard.state === 'SUSPENDING'
            ? 'resend-suspend'
            : shard.state === 'RESUMING'
              ? 'resend-resume'
              : 'resend-launch',
      );
    }
    if (shards.length > 0) {
      this.logger.info({ shards: shards.length }, 'sent the launches and stops in flight again');
    }
    await this.askHostsToReconcile();
    return shards.length;
  }

  /**
   * Every host that is not OFFLINE is asked to reconcile now: what its agent reported while no
   * control plane listened (a container that exited, a RUNNING or STOPPED event) went to no
   * one, and its next period may be half a minute away. A large fleet is asked
   * RECONCILE_ASKS_PER_STEP hosts at a time, a step every RECONCILE_ASK_STEP_MS, so that its
   * reconciles do not all land at once. Returns the hosts asked.
   */
  async askHostsToReconcile(): Promise<string[]> {
    const hosts = await this.prisma.host.findMany({
      where: { state: { not: 'OFFLINE' } },
      select: { id: true },
      orderBy: { id: 'asc' },
    });
    for (const [i, { id }] of hosts.entries()) {
      if (this.closing) break;
      if (i > 0 && i % RECONCILE_ASKS_PER_STEP === 0) {
        await new Promise((resolve) => setTimeout(resolve, RECONCILE_ASK_STEP_MS).unref());
      }
      this.commands
        .reconcile(id)
        .catch((error: unknown) =>
          this.logger.debug(
            { err: error, hostId: id },
            'a host did not take the reconcile asked for at start (its own period will do)',
          ),
        );
    }
    return hosts.map((host) => host.id);
  }

  /**
   * One pass: returns the shards stuck at `at` (default: the database's now, the clock that
   * stamps updatedAt).
   */
  async sweep(at?: Date): Promise<StuckShard[]> {
    const shortest = shortestStuckSeconds(this.limits);
    if (shortest === undefined) return [];
    const now = at ?? (await this.prisma.$queryRaw<{ now: Date }[]>`SELECT now() AS now`)[0]!.now;
    const candidates = await this.prisma.$queryRaw<Candidate[]>`
      SELECT ${SHARD_COLUMNS},
             (SELECT array_agg(held.gpu_uuid ORDER BY gpu.index, held.gpu_uuid)
                FROM shard_gpu held JOIN gpu ON gpu.uuid = held.gpu_uuid
               WHERE held.shard_id = shard.id AND held.released_at IS NULL) AS "gpuUuids"
        FROM shard
       WHERE state = ANY(${[...TRANSITIONAL_STATES]}::shard_state[])
         AND updated_at < ${new Date(now.getTime() - shortest * 1000)}
       ORDER BY updated_at, id
       LIMIT 10000`;
    const byId = new Map(candidates.map((shard) => [shard.id, shard]));
    const stuck = stuckShards(
      candidates.map((shard) => ({
        id: shard.id,
        state: shard.state,
        sinceMs: shard.updatedAt.getTime(),
      })),
      now.getTime(),
      this.limits,
    );
    for (const state of TRANSITIONAL_STATES) {
      this.gauge.set({ state }, stuck.filter((s) => s.state === state).length);
    }
    const stillStuck = new Set(stuck.map((s) => s.id));
    for (const id of this.known.keys()) if (!stillStuck.has(id)) this.known.delete(id);
    for (const found of stuck) {
      const shard = byId.get(found.id)!;
      const seen = this.known.get(found.id);
      if (seen === undefined || seen.version !== shard.version) {
        await this.report(shard, found);
        this.known.set(found.id, { version: shard.version, actedAt: 0 });
      }
      const entry = this.known.get(found.id)!;
      if (now.getTime() - entry.actedAt >= this.limits[found.state] * 1000) {
        entry.actedAt = now.getTime();
        this.act(shard, found.action);
      }
    }
    return stuck;
  }

  private async report(shard: Candidate, found: StuckShard): Promise<void> {
    const stuckSeconds = Math.round(found.stuckForMs / 1000);
    this.logger.warn(
      {
        shardId: shard.id,
        teamId: shard.teamId,
        hostId: shard.hostId,
        state: found.state,
        stuckSeconds,
        action: found.action,
      },
      `shard stuck in ${found.state}`,
    );
    await this.audit.record(this.prisma, null, {
      action: 'shard.stuck',
      targetType: 'Shard',
      targetId: shard.id,
      teamId: shard.teamId,
      details: { state: found.state, stuckSeconds, hostId: shard.hostId, action: found.action },
    });
  }

  private act(shard: Candidate, action: StuckShard['action']): void {
    const hostId = shard.hostId;
    if (hostId === null) return;
    let sent: Promise<void> | undefined;
    if (action === 'resend-launch' && shard.gpuUuids !== null && shard.gpuUuids.length > 0) {
      const opened = tryLaunchSpecOf(shard, shard.gpuUuids);
      if ('spec' in opened) {
        sent = this.commands.launch(hostId, opened.spec);
      } else {
        this.logger.warn(
          { shardId: shard.id, teamId: shard.teamId, hostId, reason: opened.unopenable },
          "launch not sent again: its secret env does not open here (a PLACED shard fails at its host's next reconcile)",
        );
      }
    } else if (action === 'resend-stop') {
      sent = this.commands.stop(hostId, shard.id, DEFAULT_STOP_GRACE_SECONDS);
    } else if (action === 'resend-suspend') {
      const cause = (shard.suspendCause ?? 'suspend-requested') as SuspendCause;
      sent = this.commands.suspend(hostId, shard.id, cause, shard.version);
    } else if (action === 'resend-resume') {
      sent = this.commands.resume(hostId, shard.id, shard.version);
    }
    sent?.catch((error: unknown) =>
      this.logger.warn(
        { err: error, shardId: shard.id, teamId: shard.teamId, hostId },
        'could not resend the command of a stuck shard; trying again later',
      ),
    );
  }
}

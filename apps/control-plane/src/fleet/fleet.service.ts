import { Inject, Injectable } from '@nestjs/common';
import {
  MAX_SHARDS_PER_HOST,
  PROTOCOL_VERSION,
  type Heartbeat,
  type ReconcileReply,
  type ReconcileRequest,
  type RegisterReply,
  type RegisterRequest,
  type ShardLaunchSpec,
  type ShardStateEvent,
} from '@gpushards/protocol';
import { nextOnReport } from '@gpushards/limits';
import { AuditService } from '../audit/audit.service.js';
import type { Caller } from '../auth/caller.js';
import { PrismaService, type HostState, type Prisma, type ShardState } from '../database/index.js';
import { BadUserInputError, NotFoundError } from '../errors/domain-errors.js';
import {
  pageRequest,
  toConnection,
  type ConnectionShape,
  type PageRequest,
} from '../graphql/connection.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { launchSpecOf } from '../shards/launch-spec.js';
import { CommitEffects, ShardLifecycle, type TransitionFields } from '../shards/shard-lifecycle.js';
import { SHARD_COLUMNS, type ShardRecord } from '../shards/shard-record.js';
import { DEFAULT_STOP_GRACE_SECONDS } from '../shards/shards.service.js';
import { InjectClock, type Clock } from './clock.js';
import {
  gpuView,
  hostView,
  type Gpu,
  type GpusArgs,
  type Host,
  type HostsArgs,
} from './fleet.model.js';

/** What the agent should run and keep stopped: the body of register and reconcile replies. */
export interface DesiredState {
  readonly desired: ShardLaunchSpec[];
  readonly stoppedShardIds: string[];
}

export interface HeartbeatOutcome {
  /** False for a host that never registered (its agent should register). */
  readonly known: boolean;
  /** The host was OFFLINE and is back (its lost shards were recovered or failed). */
  readonly revived: boolean;
  /** Usage samples written (repeated heartbeats write none). */
  readonly samplesWritten: number;
}

export type StateEventOutcome =
  | { readonly applied: true; readonly state: ShardState }
  | {
      readonly applied: false;
      readonly reason: 'unknown-shard' | 'other-host' | 'stale' | 'not-applicable';
    };

/** What an operator's change of a host decides on. */
interface LockedHost {
  readonly id: string;
  readonly state: HostState;
  readonly cordoned: boolean;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const HOST_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** States a container that runs or is being started is in, as the agent reports them. */
const RUNNING_REPORTS = new Set(['PULLING', 'STARTING', 'RUNNING']);

/** Shards the agent must keep stopped (containers kept), newest first, bounded by the protocol. */
const STOPPED_FOR_AGENT: readonly ShardState[] = [
  'STOPPING',
  'STOPPED',
  'EXITED',
  'FAILED',
  'LOST',
];

/**
 * The fleet registry: what agents tell the control plane (register, heartbeat, shard state
 * events, reconcile) and what operators do to hosts (cordon, uncordon, drain). Expects agent
 * messages decoded and checked against their subject (libs/protocol decodeMessage and
 * checkSubjectHost), as the agent link does.
 */
@Injectable()
export class FleetService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly cache: FleetCache,
    private readonly lifecycle: ShardLifecycle,
    @InjectClock() private readonly clock: Clock,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fleet' });
  }

  // -------------------------------------------------------------------------------------
  // Agent messages

  /**
   * Creates or updates the host and its GPUs (reservations kept: a host that comes back with
   * running shards keeps them). An OFFLINE host comes back ONLINE (CORDONED if an operator
   * cordoned it); its LOST shards that the agent still runs take their reservation again,
   * the others FAIL. GPUs the agent no longer lists take no new shards. Replies with what
   * the agent should run.
   */
  async registerHost(request: RegisterRequest): Promise<RegisterReply> {
    const { host, gpus } = request;
    const now = this.clock.now();
    const effects = new CommitEffects();
    const running = new Set(
      request.runningShards.filter((s) => RUNNING_REPORTS.has(s.state)).map((s) => s.shardId),
    );
    await this.prisma.$transaction(async (tx) => {
      const rows = await tx.$queryRaw<{ state: HostState; previous: HostState | null }[]>`
        WITH previous AS (SELECT state FROM host WHERE id = ${host.hostId} FOR UPDATE)
        INSERT INTO host (id, name, labels, context_overhead_bytes, agent_version, driver_version,
                          cuda_version, simulated, last_heartbeat_at, updated_at)
        VALUES (${host.hostId}, ${host.name}, ${JSON.stringify(host.labels)}::jsonb,
                ${BigInt(host.contextOverheadBytes)}, ${host.agentVersion}, ${host.driverVersion},
                ${host.cudaVersion}, ${host.simulated}, ${now}, now())
        ON CONFLICT (id) DO UPDATE SET
          name = EXCLUDED.name, labels = EXCLUDED.labels,
          context_overhead_bytes = EXCLUDED.context_overhead_bytes,
          agent_version = EXCLUDED.agent_version, driver_version = EXCLUDED.driver_version,
          cuda_version = EXCLUDED.cuda_version, simulated = EXCLUDED.simulated,
          last_heartbeat_at = EXCLUDED.last_heartbeat_at, updated_at = now(),
          state = CASE WHEN host.state <> 'OFFLINE' THEN host.state
                       WHEN host.cordoned THEN 'CORDONED'::host_state
                       ELSE 'ONLINE'::host_state END
        RETURNING state::text AS state, (SELECT state::text FROM previous) AS previous`;
      const { state, previous } = rows[0]!;
      const kept = await this.upsertGpus(tx, host.hostId, gpus, now);
      for (const gpu of kept) {
        this.logger.warn(
          { hostId: host.hostId, gpuUuid: gpu },
          'GPU reports less memory than is reserved on it; keeping the old total until reservations shrink',
        );
      }
      await this.recoverLostShards(tx, host.hostId, running, effects, now);
      await this.audit.record(tx, null, {
        action: 'host.register',
        targetType: 'Host',
        targetId: host.hostId,
        teamId: null,
        details: {
          previousState: previous,
          state,
          gpus: gpus.length,
          agentVersion: host.agentVersion,
          simulated: host.simulated,
        },
      });
      effects.hostStates.push({ hostId: host.hostId, state });
    });
    this.lifecycle.afterCommit(effects);
    this.cache.requestRefresh();
    this.logger.info({ hostId: host.hostId, gpus: gpus.length }, 'host registered');
    const desired = await this.desiredShardsFor(host.hostId);
    return { protocolVersion: PROTOCOL_VERSION, hostId: host.hostId, accepted: true, ...desired };
  }

  /**
   * Marks the host alive, stores each GPU's and each shard's used bytes and writes one usage
   * sample per shard and GPU at `sentAt` (a repeated heartbeat writes nothing new). A heartbeat
   * from an OFFLINE host brings it back as a registration would, with the shards it lists
   * counting as running.
   */
  async recordHeartbeat(hostId: string, heartbeat: Heartbeat): Promise<HeartbeatOutcome> {
    const now = this.clock.now();
    const alive = await this.prisma.$queryRaw<{ id: string }[]>`
      UPDATE host SET last_heartbeat_at = ${now}
       WHERE id = ${hostId} AND state <> 'OFFLINE'
      RETURNING id`;
    let revived = false;
    if (alive.length === 0) {
      const known = await this.prisma.host.findUnique({
        where: { id: hostId },
        select: { id: true },
      });
      if (known === null) return { known: false, revived: false, samplesWritten: 0 };
      revived = await this.revive(hostId, new Set(heartbeat.shards.map((s) => s.shardId)), now);
    }
    if (heartbeat.gpus.length > 0) {
      // In UUID order, the order placement's conditional update locks GPU rows in.
      const gpus = [...heartbeat.gpus].sort((a, b) => (a.uuid < b.uuid ? -1 : 1));
      await this.prisma.$executeRaw`
        UPDATE gpu SET used_bytes = reported.used
          FROM unnest(${gpus.map((g) => g.uuid)}::text[],
                      ${gpus.map((g) => BigInt(g.usedBytes))}::bigint[])
               AS reported(uuid, used)
         WHERE gpu.uuid = reported.uuid AND gpu.host_id = ${hostId}
           AND gpu.used_bytes <> reported.used`;
    }
    const shardIds: string[] = [];
    const gpuUuids: string[] = [];
    const used: bigint[] = [];
    for (const shard of heartbeat.shards) {
      if (!UUID.test(shard.shardId)) continue;
      for (const gpu of shard.usedBytesPerGpu) {
        shardIds.push(shard.shardId);
        gpuUuids.push(gpu.gpuUuid);
        used.push(BigInt(gpu.usedBytes));
      }
    }
    if (shardIds.length === 0) return { known: true, revived, samplesWritten: 0 };
    await this.prisma.$executeRaw`
      UPDATE shard_gpu SET used_bytes = reported.used
        FROM unnest(${shardIds}::uuid[], ${gpuUuids}::text[], ${used}::bigint[])
             AS reported(shard_id, gpu_uuid, used),
             shard
       WHERE shard_gpu.shard_id = reported.shard_id AND shard_gpu.gpu_uuid = reported.gpu_uuid
         AND shard_gpu.released_at IS NULL
         AND shard.id = reported.shard_id AND shard.host_id = ${hostId}
         AND shard_gpu.used_bytes <> reported.used`;
    const samplesWritten = await this.prisma.$executeRaw`
      INSERT INTO usage_sample (shard_id, gpu_uuid, at, used_bytes)
      SELECT reported.shard_id, reported.gpu_uuid, ${new Date(heartbeat.sentAt)}, reported.used
        FROM unnest(${shardIds}::uuid[], ${gpuUuids}::text[], ${used}::bigint[])
             AS reported(shard_id, gpu_uuid, used)
        JOIN shard ON shard.id = reported.shard_id AND shard.host_id = ${hostId}
      ON CONFLICT DO NOTHING`;
    return { known: true, revived, samplesWritten };
  }

  /**
   * Applies one shard's reported state change: only events newer (`at`) than the last applied
   * one for the shard, from the shard's own host, that make sense in its state (see
   * libs/limits nextOnReport). EXITED, FAILED, STOPPED and VANISHED release the reservation.
   */
  async applyShardStateEvent(hostId: string, event: ShardStateEvent): Promise<StateEventOutcome> {
    if (!UUID.test(event.shardId)) return { applied: false, reason: 'unknown-shard' };
    const at = new Date(event.at);
    const effects = new CommitEffects();
    const outcome = await this.prisma.$transaction(async (tx): Promise<StateEventOutcome> => {
      const shard = await this.lifecycle.lock(tx, event.shardId);
      if (shard === undefined) return { applied: false, reason: 'unknown-shard' };
      if (shard.hostId !== hostId) return { applied: false, reason: 'other-host' };
      if (shard.lastEventAt !== null && at.getTime() <= shard.lastEventAt.getTime()) {
        return { applied: false, reason: 'stale' };
      }
      const report = nextOnReport(shard.state, event.state);
      if (report === undefined) return { applied: false, reason: 'not-applicable' };
      let next: ShardState = report.state;
      let cause = report.cause;
      const fields: TransitionFields = {
        lastEventAt: at,
        ...(event.containerId === undefined ? {} : { containerId: event.containerId }),
        ...(event.exitCode === undefined ? {} : { exitCode: event.exitCode }),
        ...(next === 'RUNNING' ? { startedAt: at } : {}),
        ...(event.state === 'FAILED' || event.state === 'VANISHED'
          ? { failureReason: failureReasonOf(event) }
          : {}),
      };
      if (next === shard.state) {
        await tx.$executeRaw`
          UPDATE shard SET last_event_at = ${at},
                           container_id = coalesce(${event.containerId ?? null}, container_id)
           WHERE id = ${shard.id}::uuid`;
        return { applied: true, state: next };
      }
      let extra: TransitionFields = {};
      if (
        shard.state === 'LOST' &&
        next === 'RUNNING' &&
        !(await this.lifecycle.reacquire(tx, shard, effects))
      ) {
        next = 'FAILED';
        cause = 'failed';
        extra = { failureReason: 'its GPUs were given to other shards while its host was offline' };
      }
      await this.lifecycle.moveTo(tx, shard, next, cause, { ...fields, ...extra }, effects, at);
      return { applied: true, state: next };
    });
    this.lifecycle.afterCommit(effects);
    return outcome;
  }

  /**
   * The agent's periodic report of its shard containers. Settles what events may have missed
   * (a STOPPING shard whose container is gone or stopped is STOPPED; a PLACED or STARTING one
   * whose container runs is RUNNING; a RUNNING one whose container is there but stopped is
   * EXITED, since its exit event was lost), brings an OFFLINE host back, and replies with what
   * should run. NOT_FOUND for a host that never registered (it must register first).
   */
  async reconcile(hostId: string, request: ReconcileRequest): Promise<ReconcileReply> {
    const host = await this.prisma.host.findUnique({
      where: { id: hostId },
      select: { state: true },
    });
    if (host === null) throw new NotFoundError('host', hostId);
    const running = new Set(request.containers.filter((c) => c.running).map((c) => c.shardId));
    const containerOf = new Map(request.containers.map((c) => [c.shardId, c.containerId]));
    const stoppedContainers = new Set(
      request.containers.filter((c) => !c.running).map((c) => c.shardId),
    );
    const now = this.clock.now();
    if (host.state === 'OFFLINE') await this.revive(hostId, running, now);
    const effects = new CommitEffects();
    await this.prisma.$transaction(async (tx) => {
      const shards = await tx.$queryRaw<ShardRecord[]>`
        SELECT ${SHARD_COLUMNS} FROM shard
         WHERE host_id = ${hostId} AND state IN ('PLACED', 'STARTING', 'RUNNING', 'STOPPING')
         ORDER BY id FOR UPDATE`;
      for (const shard of shards) {
        const isRunning = running.has(shard.id);
        if (shard.state === 'STOPPING' && !isRunning) {
          await this.lifecycle.moveTo(tx, shard, 'STOPPED', 'stopped', {}, effects, now);
        } else if (shard.state === 'RUNNING' && stoppedContainers.has(shard.id)) {
          const failureReason = 'its container was found stopped by reconciliation';
          await this.lifecycle.moveTo(
            tx,
            shard,
            'EXITED',
            'exited',
            { failureReason },
            effects,
            now,
          );
        } else if (shard.state !== 'STOPPING' && shard.state !== 'RUNNING' && isRunning) {
          // The container id too: a container adopted by a restarted agent sends no event.
          const containerId = containerOf.get(shard.id);
          await this.lifecycle.moveTo(
            tx,
            shard,
            'RUNNING',
            'started',
            { startedAt: now, ...(containerId === undefined ? {} : { containerId }) },
            effects,
            now,
          );
        }
      }
    });
    this.lifecycle.afterCommit(effects);
    return { protocolVersion: PROTOCOL_VERSION, hostId, ...(await this.desiredShardsFor(hostId)) };
  }

  /**
   * What should run on the host (PLACED, STARTING, RUNNING, with their caps) and which shards
   * must stay stopped with their containers kept (the newest, up to the protocol's bound);
   * the agent removes any other shard container.
   */
  async desiredShardsFor(hostId: string): Promise<DesiredState> {
    const runnable = await this.prisma.$queryRaw<(ShardRecord & { gpuUuids: string[] | null })[]>`
      SELECT ${SHARD_COLUMNS},
             (SELECT array_agg(held.gpu_uuid ORDER BY gpu.index, held.gpu_uuid)
                FROM shard_gpu held JOIN gpu ON gpu.uuid = held.gpu_uuid
               WHERE held.shard_id = shard.id AND held.released_at IS NULL) AS "gpuUuids"
        FROM shard
       WHERE host_id = ${hostId} AND state IN ('PLACED', 'STARTING', 'RUNNING')
       ORDER BY created_at, id
       LIMIT ${MAX_SHARDS_PER_HOST}`;
    const stopped = await this.prisma.$queryRaw<{ id: string }[]>`
      SELECT id::text AS id FROM shard
       WHERE host_id = ${hostId} AND state = ANY(${[...STOPPED_FOR_AGENT]}::shard_state[])
       ORDER BY updated_at DESC, id
       LIMIT ${MAX_SHARDS_PER_HOST}`;
    return {
      desired: runnable
        .filter((shard) => shard.gpuUuids !== null && shard.gpuUuids.length > 0)
        .map((shard) => launchSpecOf(shard, shard.gpuUuids ?? [])),
      stoppedShardIds: stopped.map((shard) => shard.id),
    };
  }

  // -------------------------------------------------------------------------------------
  // Offline hosts

  /**
   * Hosts whose last heartbeat is older than `deadline` become OFFLINE: their PLACED, STARTING
   * and RUNNING shards LOST, STOPPING ones STOPPED, reservations released. Nothing is
   * rescheduled elsewhere. Returns the hosts it marked.
   */
  async markSilentHostsOffline(deadline: Date): Promise<string[]> {
    const silent = await this.prisma.$queryRaw<{ id: string }[]>`
      SELECT id FROM host
       WHERE state <> 'OFFLINE' AND (last_heartbeat_at IS NULL OR last_heartbeat_at < ${deadline})
       ORDER BY id`;
    const marked: string[] = [];
    for (const { id } of silent) {
      if (await this.markOffline(id, deadline)) marked.push(id);
    }
    return marked;
  }

  private async markOffline(hostId: string, deadline: Date): Promise<boolean> {
    const now = this.clock.now();
    const effects = new CommitEffects();
    const marked = await this.prisma.$transaction(async (tx) => {
      const rows = await tx.$queryRaw<{ previous: HostState; lastHeartbeatAt: Date | null }[]>`
        WITH previous AS (SELECT state FROM host WHERE id = ${hostId} FOR UPDATE)
        UPDATE host SET state = 'OFFLINE', updated_at = now()
         WHERE id = ${hostId} AND state <> 'OFFLINE'
           AND (last_heartbeat_at IS NULL OR last_heartbeat_at < ${deadline})
        RETURNING (SELECT state::text FROM previous) AS previous,
                  last_heartbeat_at AS "lastHeartbeatAt"`;
      const row = rows[0];
      if (row === undefined) return false;
      const shards = await tx.$queryRaw<ShardRecord[]>`
        SELECT ${SHARD_COLUMNS} FROM shard
         WHERE host_id = ${hostId} AND state IN ('PLACED', 'STARTING', 'RUNNING', 'STOPPING')
         ORDER BY id FOR UPDATE`;
      for (const shard of shards) {
        const next: ShardState = shard.state === 'STOPPING' ? 'STOPPED' : 'LOST';
        await this.lifecycle.moveTo(tx, shard, next, 'host-offline', {}, effects, now);
        await this.audit.record(tx, null, {
          action: next === 'LOST' ? 'shard.lost' : 'shard.stop',
          targetType: 'Shard',
          targetId: shard.id,
          teamId: shard.teamId,
          details: { from: shard.state, to: next, hostId, reason: 'host offline' },
        });
      }
      await this.audit.record(tx, null, {
        action: 'host.offline',
        targetType: 'Host',
        targetId: hostId,
        teamId: null,
        details: {
          previousState: row.previous,
          lastHeartbeatAt: row.lastHeartbeatAt?.toISOString() ?? null,
          shards: shards.map((shard) => shard.id),
        },
      });
      effects.hostStates.push({ hostId, state: 'OFFLINE' });
      return true;
    });
    if (!marked) return false;
    this.lifecycle.afterCommit(effects);
    this.logger.warn(
      { hostId, lostShards: effects.changes.length },
      'host missed its heartbeats: OFFLINE, its shards lost and released',
    );
    return true;
  }

  /** An OFFLINE host that speaks again: back to ONLINE (or CORDONED), lost shards settled. */
  private async revive(hostId: string, running: ReadonlySet<string>, now: Date): Promise<boolean> {
    const effects = new CommitEffects();
    const revived = await this.prisma.$transaction(async (tx) => {
      const rows = await tx.$queryRaw<{ state: HostState }[]>`
        UPDATE host SET state = CASE WHEN cordoned THEN 'CORDONED'::host_state ELSE 'ONLINE'::host_state END,
                        last_heartbeat_at = ${now}, updated_at = now()
         WHERE id = ${hostId} AND state = 'OFFLINE'
        RETURNING state::text AS state`;
      const row = rows[0];
      if (row === undefined) return false;
      await this.recoverLostShards(tx, hostId, running, effects, now);
      await this.audit.record(tx, null, {
        action: 'host.online',
        targetType: 'Host',
        targetId: hostId,
        teamId: null,
        details: { state: row.state },
      });
      effects.hostStates.push({ hostId, state: row.state });
      return true;
    });
    this.lifecycle.afterCommit(effects);
    if (revived) this.logger.info({ hostId }, 'host is back');
    return revived;
  }

  /**
   * The host's LOST shards: those its agent still runs take their reservation again and are
   * RUNNING (FAILED if their GPUs no longer have room); the others FAILED.
   */
  private async recoverLostShards(
    tx: Prisma.TransactionClient,
    hostId: string,
    running: ReadonlySet<string>,
    effects: CommitEffects,
    now: Date,
  ): Promise<void> {
    const lost = await tx.$queryRaw<ShardRecord[]>`
      SELECT ${SHARD_COLUMNS} FROM shard
       WHERE host_id = ${hostId} AND state = 'LOST' ORDER BY id FOR UPDATE`;
    for (const shard of lost) {
      let next: ShardState = 'FAILED';
      let fields: TransitionFields = {
        failureReason: 'its container was gone when its host came back',
      };
      if (running.has(shard.id)) {
        if (await this.lifecycle.reacquire(tx, shard, effects)) {
          next = 'RUNNING';
          fields = {};
        } else {
          fields = {
            failureReason: 'its GPUs were given to other shards while its host was offline',
          };
        }
      }
      const cause = next === 'RUNNING' ? 'recovered' : 'host-back-without-it';
      await this.lifecycle.moveTo(tx, shard, next, cause, fields, effects, now);
      await this.audit.record(tx, null, {
        action: next === 'RUNNING' ? 'shard.recover' : 'shard.fail',
        targetType: 'Shard',
        targetId: shard.id,
        teamId: shard.teamId,
        details: { from: 'LOST', to: next, hostId, ...fields },
      });
    }
  }

  /** Creates or updates the GPUs; marks the host's unlisted GPUs missing. Returns GPUs whose total was kept. */
  private async upsertGpus(
    tx: Prisma.TransactionClient,
    hostId: string,
    gpus: RegisterRequest['gpus'],
    now: Date,
  ): Promise<string[]> {
    const uuids = gpus.map((gpu) => gpu.uuid);
    let kept: string[] = [];
    if (gpus.length > 0) {
      const rows = await tx.$queryRaw<{ uuid: string; totalBytes: bigint }[]>`
        INSERT INTO gpu (uuid, host_id, index, model, total_bytes, used_bytes, updated_at)
        SELECT reported.uuid, ${hostId}, reported.index, reported.model, reported.total,
               reported.used, now()
          FROM unnest(${uuids}::text[], ${gpus.map((g) => g.index)}::int[],
                      ${gpus.map((g) => g.model)}::text[],
                      ${gpus.map((g) => BigInt(g.totalBytes))}::bigint[],
                      ${gpus.map((g) => BigInt(g.usedBytes))}::bigint[])
               AS reported(uuid, index, model, total, used)
        ON CONFLICT (uuid) DO UPDATE SET
          host_id = EXCLUDED.host_id, index = EXCLUDED.index, model = EXCLUDED.model,
          used_bytes = EXCLUDED.used_bytes, missing_since = NULL, updated_at = now(),
          total_bytes = CASE
            WHEN gpu.reserved_bytes <= floor(EXCLUDED.total_bytes * gpu.overcommit_ratio)
            THEN EXCLUDED.total_bytes ELSE gpu.total_bytes END
        RETURNING uuid, total_bytes AS "totalBytes"`;
      const reported = new Map(gpus.map((gpu) => [gpu.uuid, BigInt(gpu.totalBytes)]));
      kept = rows.filter((row) => row.totalBytes !== reported.get(row.uuid)).map((row) => row.uuid);
    }
    await tx.$executeRaw`
      UPDATE gpu SET missing_since = ${now}
       WHERE host_id = ${hostId} AND missing_since IS NULL AND uuid <> ALL(${uuids}::text[])`;
    return kept;
  }

  // -------------------------------------------------------------------------------------
  // Operators

  /** No new shards on the host; its shards stay. Kept while the host is OFFLINE. */
  async cordon(caller: Caller, id: string): Promise<Host> {
    return this.changeHost(caller, id, 'host.cordon', async (tx, host) => {
      if (host.cordoned) return undefined;
      return { cordoned: true, state: host.state === 'ONLINE' ? 'CORDONED' : host.state };
    });
  }

  /** Takes new shards again (CORDONED or DRAINING → ONLINE; an OFFLINE host comes back ONLINE). */
  async uncordon(caller: Caller, id: string): Promise<Host> {
    return this.changeHost(caller, id, 'host.uncordon', async (tx, host) => {
      if (!host.cordoned && host.state !== 'CORDONED' && host.state !== 'DRAINING')
        return undefined;
      return { cordoned: false, state: host.state === 'OFFLINE' ? 'OFFLINE' : 'ONLINE' };
    });
  }

  /**
   * Cordon, and stop every shard on the host through the agent (STOPPING; STOPPED at once on
   * an OFFLINE host or for LOST shards). Stopped shards are not placed elsewhere: their teams
   * create new ones. The host stays DRAINING until uncordoned.
   */
  async drain(caller: Caller, id: string): Promise<Host> {
    return this.changeHost(caller, id, 'host.drain', async (tx, host, effects) => {
      const offline = host.state === 'OFFLINE';
      const shards = await tx.$queryRaw<ShardRecord[]>`
        SELECT ${SHARD_COLUMNS} FROM shard
         WHERE host_id = ${host.id} AND state IN ('PLACED', 'STARTING', 'RUNNING', 'LOST')
         ORDER BY id FOR UPDATE`;
      const state: HostState = offline ? 'OFFLINE' : 'DRAINING';
      if (shards.length === 0 && host.cordoned && host.state === state) return undefined;
      for (const shard of shards) {
        const next: ShardState = offline || shard.state === 'LOST' ? 'STOPPED' : 'STOPPING';
        const cause = next === 'STOPPING' ? 'stop-requested' : 'stopped';
        await this.lifecycle.moveTo(tx, shard, next, cause, {}, effects, this.clock.now());
        await this.audit.record(tx, caller, {
          action: 'shard.stop',
          targetType: 'Shard',
          targetId: shard.id,
          teamId: shard.teamId,
          details: { from: shard.state, to: next, reason: 'host drain', hostId: host.id },
        });
        if (next === 'STOPPING') {
          const shardId = shard.id;
          effects.command({ shardId, hostId: host.id, command: 'stop' }, (commands) =>
            commands.stop(host.id, shardId, DEFAULT_STOP_GRACE_SECONDS),
          );
        }
      }
      return { cordoned: true, state, details: { stoppedShards: shards.map((s) => s.id) } };
    });
  }

  /**
   * Runs an operator's change of one host in a transaction with its audit event. `decide`
   * returns the new cordon flag and state, or undefined when nothing changes (no event).
   */
  private async changeHost(
    caller: Caller,
    id: string,
    action: string,
    decide: (
      tx: Prisma.TransactionClient,
      host: LockedHost,
      effects: CommitEffects,
    ) => Promise<
      { cordoned: boolean; state: HostState; details?: Prisma.InputJsonObject } | undefined
    >,
  ): Promise<Host> {
    const hostId = checkHostId('id', id);
    const effects = new CommitEffects();
    await this.prisma.$transaction(async (tx) => {
      const rows = await tx.$queryRaw<LockedHost[]>`
        SELECT id, state::text AS state, cordoned FROM host WHERE id = ${hostId} FOR UPDATE`;
      const host = rows[0];
      if (host === undefined) throw new NotFoundError('host', id);
      const change = await decide(tx, host, effects);
      if (change === undefined) return;
      await tx.$executeRaw`
        UPDATE host SET cordoned = ${change.cordoned}, state = ${change.state}::host_state,
                        updated_at = now()
         WHERE id = ${hostId}`;
      await this.audit.record(tx, caller, {
        action,
        targetType: 'Host',
        targetId: hostId,
        teamId: null,
        details: { from: host.state, to: change.state, ...change.details },
      });
      effects.hostStates.push({ hostId, state: change.state });
    });
    this.lifecycle.afterCommit(effects);
    this.logger.info({ hostId, action, actorTokenId: caller.tokenId }, 'host changed');
    return this.get(hostId);
  }

  // -------------------------------------------------------------------------------------
  // Reads (every token may see hosts and GPUs; shards stay team-scoped)

  async get(id: string): Promise<Host> {
    const hostId = checkHostId('id', id);
    const host = await this.prisma.host.findUnique({
      where: { id: hostId },
      include: { gpus: true },
    });
    if (host === null) throw new NotFoundError('host', id);
    return hostView(host);
  }

  /** By id. */
  async list(args: HostsArgs): Promise<ConnectionShape<Host>> {
    const page = pageRequest(args);
    const rows = await this.prisma.host.findMany({
      where: {
        ...(args.states && args.states.length > 0 ? { state: { in: args.states } } : {}),
        ...(page.afterKey === undefined ? {} : { id: { gt: page.afterKey } }),
      },
      include: { gpus: true },
      orderBy: { id: 'asc' },
      take: page.take,
    });
    return toConnection(page, rows.map(hostView), (host) => host.id);
  }

  /** By UUID. */
  async gpus(args: GpusArgs): Promise<ConnectionShape<Gpu>> {
    const page: PageRequest = pageRequest(args);
    const hostId = typeof args.hostId === 'string' ? checkHostId('hostId', args.hostId) : undefined;
    const rows = await this.prisma.gpu.findMany({
      where: {
        ...(hostId === undefined ? {} : { hostId }),
        ...(typeof args.model === 'string'
          ? { model: { contains: args.model, mode: 'insensitive' } }
          : {}),
        ...(page.afterKey === undefined ? {} : { uuid: { gt: page.afterKey } }),
      },
      orderBy: { uuid: 'asc' },
      take: page.take,
    });
    return toConnection(page, rows.map(gpuView), (gpu) => gpu.uuid);
  }
}

function checkHostId(field: string, value: string): string {
  if (!HOST_ID.test(value)) {
    throw BadUserInputError.of(field, 'is not a host id (1 to 64 of A-Z a-z 0-9 _ -)');
  }
  return value;
}

function failureReasonOf(event: ShardStateEvent): string {
  if (event.state === 'VANISHED') {
    return event.reason === undefined
      ? 'the container vanished'
      : `the container vanished: ${event.reason}`;
  }
  return event.reason ?? 'the agent reported a failure without a reason';
}

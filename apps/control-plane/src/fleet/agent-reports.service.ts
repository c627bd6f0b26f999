import { Inject, Injectable } from '@nestjs/common';
import {
  PROTOCOL_VERSION,
  type Heartbeat,
  type ReconcileReply,
  type ReconcileRequest,
  type RegisterReply,
  type RegisterRequest,
  type ShardStateEvent,
} from '@gpushards/protocol';
import {
  converge,
  observationOf,
  RUNNABLE_STATES,
  SUSPENDED_STATES,
  type ContainerObservation,
} from '@gpushards/limits';
import { PrismaService, type RawSql, type ShardState } from '../database/index.js';
import { NotFoundError } from '../errors/domain-errors.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import type { ShardRecord } from '../shards/shard-record.js';
import {
  CommitEffects,
  ShardLifecycle,
  type ShardMove,
  type TransitionFields,
} from '../shards/shard-lifecycle.js';
import { InjectClock, type Clock } from './clock.js';
import { DesiredShards, STOPPED_FOR_AGENT } from './desired-shards.js';
import {
  insertUsageSamples,
  lockHostShards,
  readHostForReconcile,
  readHostShards,
  touchLiveHosts,
  writeGpuReports,
  writeShardReadings,
} from './fleet-statements.js';
import { HeartbeatRows, type HostHeartbeat } from './heartbeat-rows.js';
import { HostLivenessService, type RunningContainers } from './host-liveness.service.js';
import { HostRegistrationService } from './host-registration.service.js';
import {
  ShardStateEvents,
  type HostStateEvent,
  type StateEventOutcome,
} from './shard-state-events.js';

export type { DesiredState } from './desired-shards.js';

export interface HeartbeatOutcome {
  /** False for a host that never registered (its agent should register). */
  readonly known: boolean;
  /** The host was OFFLINE and is back (its lost shards were recovered or failed). */
  readonly revived: boolean;
  /** Usage samples written (repeated heartbeats write none). */
  readonly samplesWritten: number;
}

export type { StateEventOutcome } from './shard-state-events.js';

/**
 * A reconcile settles every shard of a host in one transaction: up to 1,024 after a restart
 * (bench/lifecycle/restart-settle.mjs), which took over Prisma's default 5 s on a loaded
 * machine, failed, and left the host to its next period.
 */
const RECONCILE_TRANSACTION = { maxWait: 10_000, timeout: 30_000 };

/**
 * What agents tell the control plane: register, heartbeat, shard state events, reconcile; and
 * what each host should run in return. Expects agent messages decoded and checked against
 * their subject (libs/protocol decodeMessage and checkSubjectHost), as the agent link does.
 */
@Injectable()
export class AgentReportsService {
  private readonly logger: Logger;
  private readonly stateEvents: ShardStateEvents;

  constructor(
    private readonly prisma: PrismaService,
    private readonly lifecycle: ShardLifecycle,
    private readonly liveness: HostLivenessService,
    private readonly registration: HostRegistrationService,
    private readonly desiredShards: DesiredShards,
    @InjectClock() private readonly clock: Clock,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fleet' });
    this.stateEvents = new ShardStateEvents(prisma, lifecycle, this.logger);
  }

  /** Registers the host (HostRegistrationService, batched with the registrations meanwhile). */
  registerHost(request: RegisterRequest): Promise<RegisterReply> {
    return this.registration.register(request);
  }

  /** One heartbeat: recordHeartbeats with a batch of one. */
  async recordHeartbeat(hostId: string, heartbeat: Heartbeat): Promise<HeartbeatOutcome> {
    return (await this.recordHeartbeats([{ hostId, heartbeat }]))[0]!;
  }

  /**
   * Heartbeats of many hosts at once (HeartbeatBatcher collects them): marks the hosts alive,
   * stores each GPU's used and unattributed bytes and each shard's reading per GPU (used and
   * real bytes, busy ratio, last kernel: what the host fence and the compute ledger report
   * too) and writes one usage sample per shard and GPU at `sentAt` (a repeated heartbeat
   * writes nothing new), in four statements for the whole batch instead of up to seven per
   * heartbeat; unchanged rows are not written. The fence's findings (violations, ungoverned
   * work) are FenceService.recordFindings's, per heartbeat. A heartbeat from an
   * OFFLINE host brings it back as a registration would, with the shards it lists counting as
   * running. The outcomes are in the order of `beats`.
   */
  async recordHeartbeats(beats: readonly HostHeartbeat[]): Promise<HeartbeatOutcome[]> {
    const now = this.clock.now();
    // Hosts that are ONLINE (or DRAINING) are marked alive and their reports written, a few
    // statements for the whole batch. Each is a transaction of its own: holding one statement's
    // row locks while taking the next's would deadlock with placement and with releases,
    // which lock the same rows in another order.
    const alive = await touchLiveHosts(
      this.prisma.direct,
      beats.map((beat) => beat.hostId),
      now,
    );
    const samples = await writeReports(this.prisma.direct, beats, alive);
    const revived = new Set<string>();
    const back = new Set<string>();
    for (const { hostId, heartbeat } of beats) {
      if (alive.has(hostId) || back.has(hostId)) continue;
      const host = await this.prisma.host.findUnique({
        where: { id: hostId },
        select: { id: true },
      });
      if (host === null) continue;
      back.add(hostId);
      const running: RunningContainers = new Map(
        heartbeat.shards.map((s) => [s.shardId, s.memory]),
      );
      if (await this.liveness.revive(hostId, running, now)) revived.add(hostId);
    }
    if (back.size > 0) {
      samples.push(...(await writeReports(this.prisma.direct, beats, back)));
    }
    const samplesOf = new Map<string, number>();
    for (const hostId of samples) samplesOf.set(hostId, (samplesOf.get(hostId) ?? 0) + 1);
    const counted = new Set<string>();
    return beats.map(({ hostId }) => {
      if (!alive.has(hostId) && !back.has(hostId)) {
        return { known: false, revived: false, samplesWritten: 0 };
      }
      // A host with two heartbeats in one batch: its samples are told once.
      const samplesWritten = counted.has(hostId) ? 0 : (samplesOf.get(hostId) ?? 0);
      counted.add(hostId);
      return { known: true, revived: revived.has(hostId), samplesWritten };
    });
  }

  /**
   * Applies one shard's reported state change: only events newer (`at`) than the last applied
   * one for the shard, from the shard's own host, that make sense in its state (see
   * libs/limits nextOnReport). EXITED, FAILED, STOPPED and VANISHED release the reservation.
   */
  async applyShardStateEvent(hostId: string, event: ShardStateEvent): Promise<StateEventOutcome> {
    const [outcome] = await this.applyShardStateEvents([{ hostId, event }]);
    return outcome!;
  }

  /**
   * Applies many hosts' state events in one transaction of a few statements (the agent link's
   * WriteBatcher gathers them), each exactly as applyShardStateEvent would, in arrival order
   * for each shard (ShardStateEvents).
   */
  applyShardStateEvents(events: readonly HostStateEvent[]): Promise<StateEventOutcome[]> {
    return this.stateEvents.apply(events);
  }

  /**
   * The agent's report of its shard containers (periodic, and at once after it starts). Each
   * shard of the host that should run or is stopping is settled by the convergence table
   * (libs/limits converge) against what the agent observed of its container: a STOPPING shard
   * whose container is stopped or gone is STOPPED, a PLACED or STARTING one whose container
   * runs is RUNNING, one whose container exited is EXITED, a dead container FAILED. Shards the
   * agent is busy with, or with an event applied since it looked, wait for the next round.
   * Brings an OFFLINE host back, and replies with what should run. NOT_FOUND for a host that
   * never registered (it must register first).
   */
  async reconcile(hostId: string, request: ReconcileRequest): Promise<ReconcileReply> {
    // Most reconciles find nothing to settle: one read of the host and its shards decides that
    // and gives the reply (a transaction of four statements and four more reads saved per
    // period and host: 33 reconciles a second at 1,000 hosts). Only what needs a move is
    // decided again on the locked rows and written, and the reply then read again.
    const view = await readHostForReconcile(
      this.prisma.direct,
      hostId,
      RECONCILE_LIVE_STATES,
      STOPPED_FOR_AGENT,
    );
    if (view === undefined) throw new NotFoundError('host', hostId);
    const reported = new Map(request.containers.map((c) => [c.shardId, c]));
    const observedAt = request.observedAt === undefined ? undefined : new Date(request.observedAt);
    const now = this.clock.now();
    const acceptsKept = request.acceptsKeptShards === true;
    const settle = (shards: readonly ShardRecord[]): ShardMove[] =>
      settlingMoves(shards, reported, observedAt, now);
    let shards: readonly ShardRecord[] = view.shards;
    if (view.hostState === 'OFFLINE') {
      const running: RunningContainers = new Map(
        request.containers.filter((c) => c.running).map((c) => [c.shardId, c.memory]),
      );
      await this.liveness.revive(hostId, running, now);
      shards = await readHostShards(this.prisma.direct, hostId, SETTLED_STATES);
    }
    const settled = shards.filter((shard) => SETTLED_STATES.includes(shard.state));
    if (settle(settled).length > 0) {
      const effects = new CommitEffects();
      await this.prisma.$transaction(async (tx) => {
        const moves = settle(await lockHostShards(tx, hostId, SETTLED_STATES));
        await this.lifecycle.moveMany(tx, moves, effects, now);
      }, RECONCILE_TRANSACTION);
      this.lifecycle.afterCommit(effects);
    } else if (view.hostState !== 'OFFLINE') {
      const desired = await this.desiredShards.desiredOf(
        hostId,
        acceptsKept,
        view.shards,
        view.stoppedIds,
      );
      return { protocolVersion: PROTOCOL_VERSION, hostId, ...desired };
    }
    const desired = await this.desiredShards.desiredShardsFor(hostId, acceptsKept);
    return { protocolVersion: PROTOCOL_VERSION, hostId, ...desired };
  }
}

/** The states a reconcile settles against the agent's report. */
const SETTLED_STATES: readonly ShardState[] = [
  'PLACED',
  'STARTING',
  'RUNNING',
  'SUSPENDING',
  'SUSPENDED',
  'RESUMING',
  'STOPPING',
];

/** The shards a reconcile reads whole: those it settles, and those its reply lists. */
const RECONCILE_LIVE_STATES: readonly ShardState[] = [
  ...new Set([...SETTLED_STATES, ...RUNNABLE_STATES, ...SUSPENDED_STATES]),
];

/** The moves that settle the host's shards against what its agent reported (convergence table). */
function settlingMoves(
  shards: readonly ShardRecord[],
  reported: ReadonlyMap<string, ReconcileRequest['containers'][number]>,
  observedAt: Date | undefined,
  now: Date,
): ShardMove[] {
  const moves: ShardMove[] = [];
  for (const shard of shards) {
    const container = reported.get(shard.id);
    if (container?.busy === true) continue;
    if (
      observedAt !== undefined &&
      shard.lastEventAt !== null &&
      shard.lastEventAt.getTime() >= observedAt.getTime()
    ) {
      continue;
    }
    const observed = observationOfReport(shard.state, container, observedAt !== undefined);
    if (observed === undefined) continue;
    const { next, reason, exitCode } = converge(shard.state, observed);
    if (next === undefined || next.state === shard.state) continue;
    const fields: TransitionFields = {
      ...(reason === undefined ? {} : { failureReason: reason }),
      ...(exitCode === undefined ? {} : { exitCode }),
      // The container id too: a container adopted by a restarted agent sends no event.
      ...(container === undefined ? {} : { containerId: container.containerId }),
      ...(next.state === 'RUNNING' ? { startedAt: now } : {}),
    };
    moves.push({ shard, state: next.state, cause: next.cause, fields });
  }
  return moves;
}

/**
 * What the agent saw of a shard's container. An older agent sends no status and no time: it
 * says only running or not, so no absence is read from it unless the shard is stopping, and a
 * stopped container only ends a shard that ran (it may be one that never started).
 */
function observationOfReport(
  state: ShardState,
  container: ReconcileRequest['containers'][number] | undefined,
  dated: boolean,
): ContainerObservation | undefined {
  if (container?.status !== undefined) {
    return observationOf(container.status, container.exitCode, container.memory);
  }
  if (container === undefined) {
    return dated || state === 'STOPPING' ? { kind: 'absent' } : undefined;
  }
  if (container.running) {
    return container.memory === undefined
      ? { kind: 'running' }
      : { kind: 'running', memory: container.memory };
  }
  return state === 'RUNNING' || state === 'STOPPING' || dated
    ? { kind: 'exited', exitCode: container.exitCode ?? 0 }
    : undefined;
}

/**
 * Writes what the heartbeats of `hosts` report (GPU used and unattributed bytes, each shard's
 * reading per GPU, usage samples), one statement per table for them all; returns the
 * reporting host of each new sample.
 */
async function writeReports(
  sql: RawSql,
  beats: readonly HostHeartbeat[],
  hosts: ReadonlySet<string>,
): Promise<string[]> {
  const rows = HeartbeatRows.of(beats, hosts);
  await writeGpuReports(sql, rows);
  await writeShardReadings(sql, rows);
  return insertUsageSamples(sql, rows);
}

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
import {
  converge,
  observationOf,
  RUNNABLE_STATES,
  SUSPENDED_STATES,
  type ContainerObservation,
} from '@gpushards/limits';
import { AuditService } from '../audit/audit.service.js';
import { PrismaService, type RawSql, type ShardState } from '../database/index.js';
import { SecretsKeyError } from '../secrets/secret-box.js';
import { NotFoundError } from '../errors/domain-errors.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { tryLaunchSpecOf } from '../shards/launch-spec.js';
import type { ShardRecord } from '../shards/shard-record.js';
import {
  CommitEffects,
  ShardLifecycle,
  type ShardMove,
  type TransitionFields,
} from '../shards/shard-lifecycle.js';
import { failUnopenableLaunches } from '../shards/unopenable-launches.js';
import { InjectClock, type Clock } from './clock.js';
import {
  insertUsageSamples,
  lockHostShards,
  newestShardIds,
  readHostForReconcile,
  readHostShards,
  runnableShards,
  type ShardWithGpus,
  touchLiveHosts,
  upsertGpus,
  upsertRegisteredHost,
  writeGpuReports,
  writeShardReadings,
} from './fleet-statements.js';
import { HeartbeatRows, type HostHeartbeat } from './heartbeat-rows.js';
import { HostLivenessService, type RunningContainers } from './host-liveness.service.js';
import {
  ShardStateEvents,
  type HostStateEvent,
  type StateEventOutcome,
} from './shard-state-events.js';
import { SuspendBudgetCheck } from './suspend-budget-check.js';

/** What the agent should run and keep stopped: the body of register and reconcile replies. */
export interface DesiredState {
  readonly desired: ShardLaunchSpec[];
  readonly stoppedShardIds: string[];
  /** Shards whose container runs with its GPU memory in host RAM (docs/elastic.md). */
  readonly suspendedShardIds?: string[];
  /** Launched shards whose spec cannot be given here (their secrets do not open): left alone. */
  readonly keptShardIds?: string[];
}

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
 * What agents tell the control plane: register, heartbeat, shard state events, reconcile; and
 * what each host should run in return. Expects agent messages decoded and checked against
 * their subject (libs/protocol decodeMessage and checkSubjectHost), as the agent link does.
 */
@Injectable()
export class AgentReportsService {
  private readonly logger: Logger;
  private readonly stateEvents: ShardStateEvents;
  private readonly suspendBudget: SuspendBudgetCheck;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly cache: FleetCache,
    private readonly lifecycle: ShardLifecycle,
    private readonly liveness: HostLivenessService,
    @InjectClock() private readonly clock: Clock,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fleet' });
    this.stateEvents = new ShardStateEvents(prisma, lifecycle, this.logger);
    this.suspendBudget = new SuspendBudgetCheck(lifecycle, this.logger);
  }

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
    const running: RunningContainers = new Map(
      request.runningShards
        .filter((s) => RUNNING_REPORTS.has(s.state))
        .map((s) => [s.shardId, s.memory]),
    );
    await this.prisma.$transaction(async (tx) => {
      const { state, previous } = await upsertRegisteredHost(tx, host, now);
      const kept = await upsertGpus(tx, host.hostId, gpus, now, host.isolatedComputePermille ?? 0);
      for (const gpu of kept) {
        this.logger.warn(
          { hostId: host.hostId, gpuUuid: gpu },
          'GPU reports less memory than is reserved on it; keeping the old total until reservations shrink',
        );
      }
      await this.liveness.recoverLostShards(tx, host.hostId, running, effects, now);
      await this.suspendBudget.settle(tx, host.hostId, effects);
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
          ...(host.isolatedComputePermille
            ? { isolatedComputePermille: host.isolatedComputePermille }
            : {}),
        },
      });
      effects.hostStates.push({ hostId: host.hostId, state });
    });
    this.lifecycle.afterCommit(effects);
    this.cache.requestRefresh();
    this.logger.info({ hostId: host.hostId, gpus: gpus.length }, 'host registered');
    const desired = await this.desiredShardsFor(host.hostId, request.acceptsKeptShards === true);
    return { protocolVersion: PROTOCOL_VERSION, hostId: host.hostId, accepted: true, ...desired };
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
      const desired = await this.desiredOf(hostId, acceptsKept, view.shards, view.stoppedIds);
      return { protocolVersion: PROTOCOL_VERSION, hostId, ...desired };
    }
    const desired = await this.desiredShardsFor(hostId, acceptsKept);
    return { protocolVersion: PROTOCOL_VERSION, hostId, ...desired };
  }

  /**
   * What should run on the host (PLACED, STARTING, RUNNING, with their caps) and which shards
   * must stay stopped with their containers kept (the newest, up to the protocol's bound);
   * the agent removes any other shard container.
   *
   * A shard whose secret env does not open here (a key this control plane does not hold) has
   * no spec to send. Not launched yet, it FAILS (its GPUs freed). Launched, its container has
   * its environment: it is listed as kept (left as it is) to an agent that `acceptsKept`;
   * to an older agent, which would remove it, the whole answer is refused (SecretsKeyError).
   */
  async desiredShardsFor(hostId: string, acceptsKept: boolean): Promise<DesiredState> {
    const runnable = await runnableShards(this.prisma.direct, hostId, RUNNABLE_STATES);
    const stopped = await newestShardIds(this.prisma.direct, hostId, STOPPED_FOR_AGENT);
    const suspendedIds = await newestShardIds(this.prisma.direct, hostId, SUSPENDED_STATES);
    return this.desiredFrom(hostId, acceptsKept, runnable, stopped, suspendedIds);
  }

  /** desiredShardsFor from a reconcile's read of the host (readHostForReconcile). */
  private desiredOf(
    hostId: string,
    acceptsKept: boolean,
    shards: readonly ShardWithGpus[],
    stopped: string[],
  ): Promise<DesiredState> {
    // As runnableShards and newestShardIds order and bound them.
    const runnable = shards
      .filter((shard) => RUNNABLE_STATES.includes(shard.state))
      .slice(0, MAX_SHARDS_PER_HOST);
    const suspendedIds = shards
      .filter((shard) => SUSPENDED_STATES.includes(shard.state))
      .sort(
        (a, b) =>
          b.updatedAt.getTime() - a.updatedAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
      )
      .slice(0, MAX_SHARDS_PER_HOST)
      .map((shard) => shard.id);
    return this.desiredFrom(hostId, acceptsKept, runnable, stopped, suspendedIds);
  }

  private async desiredFrom(
    hostId: string,
    acceptsKept: boolean,
    runnable: readonly ShardWithGpus[],
    stopped: string[],
    suspendedIds: string[],
  ): Promise<DesiredState> {
    const suspended = suspendedIds.length > 0 ? { suspendedShardIds: suspendedIds } : {};
    const desired: ShardLaunchSpec[] = [];
    const unopenable: string[] = [];
    const kept: { id: string; reason: string }[] = [];
    for (const shard of runnable) {
      if (shard.gpuUuids === null || shard.gpuUuids.length === 0) continue;
      const opened = tryLaunchSpecOf(shard, shard.gpuUuids);
      if ('spec' in opened) desired.push(opened.spec);
      else if (shard.state === 'PLACED') unopenable.push(shard.id);
      else if (acceptsKept) kept.push({ id: shard.id, reason: opened.unopenable });
      else throw new SecretsKeyError(`shard ${shard.id} (${shard.state}): ${opened.unopenable}`);
    }
    // Not launched yet and never launchable from here: FAILED (its GPUs freed), not listed.
    await failUnopenableLaunches(this.prisma, this.lifecycle, this.logger, unopenable);
    if (kept.length > 0) {
      this.logger.warn(
        { hostId, kept },
        'shards whose secrets this control plane cannot open are left as they are on their host; start it with the key they were sealed with (docs/operations.md, "Secrets key")',
      );
      return {
        desired,
        stoppedShardIds: stopped,
        ...suspended,
        keptShardIds: kept.map((shard) => shard.id),
      };
    }
    return { desired, stoppedShardIds: stopped, ...suspended };
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

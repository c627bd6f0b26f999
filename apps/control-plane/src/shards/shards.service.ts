import { Inject, Injectable } from '@nestjs/common';
import {
  bytes,
  effectiveGpuModelFilter,
  evaluateQuota,
  type GpuModelFilter,
  type Placed,
  type PlacementRequest,
  type QuotaDenial,
  type QuotaPolicy,
  type TeamUsage,
} from '@gpushards/limits';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { AuditService } from '../audit/audit.service.js';
import { Role, type Caller } from '../auth/caller.js';
import { assertTeamVisible, canSeeTeam } from '../auth/team-scope.js';
import {
  DEFAULT_POOL_SIZE,
  lockTeamForUpdate,
  postgresErrorCode,
  isUniqueViolation,
  Prisma,
  PrismaService,
  type ShardState,
} from '../database/index.js';
import {
  BadUserInputError,
  ConflictError,
  NoCapacityError,
  NotFoundError,
  QuotaExceededError,
  type FieldProblem,
} from '../errors/domain-errors.js';
import { ShardEventBus } from '../events/shard-event-bus.js';
import { encodeCursor, pageRequest, type ConnectionShape } from '../graphql/connection.js';
import { sizeOf } from '../graphql/size.model.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { PlacementMetrics, type PlacementOutcome } from '../placement/placement-metrics.js';
import {
  noCapacityError,
  PlacementService,
  takeCapacityCtes,
  type FleetView,
  type PlacementHolds,
  type ReserveRow,
} from '../placement/placement.service.js';
import { LIVE_SHARD_STATES } from '../teams/teams.service.js';
import { formatSize } from '../validation/sizes.js';
import { checkId } from '../validation/input.js';
import { CreateAdmission } from './create-admission.js';
import { launchSpecOf } from './launch-spec.js';
import { CommitEffects, ShardLifecycle } from './shard-lifecycle.js';
import {
  checkCreateShardInput,
  checkMemoryPerGpu,
  checkPlacementInput,
  type PlacementRequestInput,
  type ShardRequest,
} from './shard-input.js';
import { isReserving, SHARD_COLUMNS, stringRecord, type ShardRecord } from './shard-record.js';
import {
  shardView,
  type CreateShardInput,
  type PlacementInput,
  type PlacementPreview,
  type ShardEvent,
  type ShardGpu,
  type ShardsArgs,
} from './shard.model.js';

/**
 * Transactions a createShard may run: the first on the cached fleet, then on a freshly read
 * one when the first found no room or kept losing races; deadlocks are retried too.
 */
const MAX_CREATE_ROUNDS = 4;

/**
 * Transaction timing for createShard: waiting for a pooled connection (admission keeps this
 * short) and the whole transaction.
 */
const CREATE_TRANSACTION_OPTIONS = { maxWait: 10_000, timeout: 20_000 };

/** Connections left to everything else (authentication, reads, agents) while creates run. */
const CONNECTIONS_KEPT_FOR_OTHERS = 2;

/** Default seconds between SIGTERM and SIGKILL for stopShard. */
export const DEFAULT_STOP_GRACE_SECONDS = 30;
const MAX_STOP_GRACE_SECONDS = 600;

/** The placement on the cached fleet found nothing (or lost every race): read the fleet again. */
class NeedFreshFleet extends Error {}

/** PostgreSQL's deadlock and serialization failures: the transaction may simply run again. */
function isTransient(error: unknown): boolean {
  const code = postgresErrorCode(error);
  return code === '40P01' || code === '40001';
}

interface TeamState {
  readonly hasPolicy: boolean;
  readonly maxTotalBytes: bigint | null;
  readonly maxShards: number | null;
  readonly maxBytesPerShard: bigint | null;
  readonly maxGpusPerShard: number | null;
  readonly allowedGpuModels: string[] | null;
  readonly priority: number | null;
  readonly shardCount: number;
  readonly reservedBytes: bigint;
  readonly existingId: string | null;
}

interface GpuRow {
  gpuUuid: string;
  index: number;
  model: string;
  reservedBytes: bigint;
  usedBytes: bigint;
  reservedAt: Date;
  releasedAt: Date | null;
}

@Injectable()
export class ShardsService {
  private readonly logger: Logger;
  private readonly admission: CreateAdmission;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly placement: PlacementService,
    private readonly cache: FleetCache,
    private readonly lifecycle: ShardLifecycle,
    private readonly metrics: PlacementMetrics,
    private readonly events: ShardEventBus,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shards' });
    const connections =
      prisma.backendKind === 'pglite' ? 1 : (prisma.config.poolSize ?? DEFAULT_POOL_SIZE);
    this.admission = new CreateAdmission(Math.max(1, connections - CONNECTIONS_KEPT_FOR_OTHERS));
  }

  // -------------------------------------------------------------------------------------
  // createShard

  /**
   * Validates, then in one transaction: team lock, idempotency, quota, placement with the
   * conditional reservation, the shard row (PLACED) and its audit event. After commit the
   * host's agent is told to launch it.
   */
  async create(caller: Caller, input: CreateShardInput): Promise<ShardRecord> {
    const started = performance.now();
    const request = checkCreateShardInput(input);
    const teamId = targetTeam(caller, input.teamId);
    await this.checkAgainstFleet(request, started);
    let outcome: PlacementOutcome = 'error';
    try {
      const created = await this.admission.run(teamId, () =>
        this.createWithRetries(caller, teamId, request, started),
      );
      outcome = created.replayed ? 'replayed' : 'placed';
      return created.shard;
    } catch (error) {
      if (error instanceof QuotaExceededError) outcome = 'quota_exceeded';
      if (error instanceof NoCapacityError) outcome = 'no_capacity';
      throw error;
    } finally {
      this.metrics.observe(outcome, (performance.now() - started) / 1000);
    }
  }

  private async createWithRetries(
    caller: Caller,
    teamId: string,
    request: ShardRequest,
    started: number,
  ): Promise<{ shard: ShardRecord; replayed: boolean }> {
    let view: FleetView = 'cached';
    for (let round = 1; ; round++) {
      const holds = this.placement.holds();
      const effects = new CommitEffects();
      try {
        const result = await this.prisma.$transaction(
          (tx) => this.createIn(tx, caller, teamId, request, view, holds, effects),
          CREATE_TRANSACTION_OPTIONS,
        );
        holds.settle(true);
        this.lifecycle.afterCommit(effects);
        if (!result.replayed) {
          this.logger.debug(
            {
              shardId: result.shard.id,
              teamId,
              hostId: result.shard.hostId,
              actorTokenId: caller.tokenId,
            },
            'shard placed',
          );
        }
        return result;
      } catch (error) {
        holds.settle(false);
        if (round < MAX_CREATE_ROUNDS && error instanceof NeedFreshFleet) {
          await this.cache.refreshedSince(started);
          view = 'fresh';
          continue;
        }
        if (round < MAX_CREATE_ROUNDS && isTransient(error)) continue;
        if (isUniqueViolation(error) && request.idempotencyKey !== null) {
          const existing = await this.findByIdempotencyKey(teamId, request.idempotencyKey);
          if (existing !== undefined)
            return { shard: this.replay(existing, request), replayed: true };
        }
        if (error instanceof NeedFreshFleet) {
          throw new ConflictError(
            'the GPUs this shard could take kept being taken by other requests; try again',
          );
        }
        throw error;
      }
    }
  }

  private async createIn(
    tx: Prisma.TransactionClient,
    caller: Caller,
    teamId: string,
    request: ShardRequest,
    view: FleetView,
    holds: PlacementHolds,
    effects: CommitEffects,
  ): Promise<{ shard: ShardRecord; replayed: boolean }> {
    await lockTeamForUpdate(tx, teamId);
    const team = await readTeamState(tx, teamId, request.idempotencyKey);
    if (team === undefined) throw new NotFoundError('team', teamId);
    if (team.existingId !== null) {
      const rows = await tx.$queryRaw<ShardRecord[]>`
        SELECT ${SHARD_COLUMNS} FROM shard WHERE id = ${team.existingId}::uuid`;
      return { shard: this.replay(rows[0]!, request), replayed: true };
    }
    const policy = quotaPolicyOf(team);
    const decision = evaluateQuota(request, usageOf(team), policy);
    if (!decision.allowed) throw quotaError(decision);
    const placementRequest = placementRequestOf(request, policy);
    const shardId = randomUUID();
    // One round trip: the conditional GPU update, the shard, its reservations and the audit
    // row, written only when every chosen GPU had room.
    const result = await this.placement.reserve<ShardRecord & ReserveRow>(
      tx,
      placementRequest,
      view,
      holds,
      (placed) => insertShardStatement(caller, teamId, shardId, request, placed),
    );
    if (result.kind === 'contended') throw new NeedFreshFleet();
    if (result.kind === 'no-fit') {
      if (view === 'fresh') throw noCapacityError(result);
      throw new NeedFreshFleet();
    }
    const { takenUuids: _taken, ...shard } = result.row!;
    effects.changes.push({ shard, previousState: null, state: 'PLACED', at: shard.createdAt });
    const spec = launchSpecOf(shard, result.gpuUuids);
    effects.command({ shardId, hostId: result.hostId, command: 'launch' }, (commands) =>
      commands.launch(result.hostId, spec),
    );
    return { shard, replayed: false };
  }

  /** The first shard of an idempotency key, if the retry asks for the same shard. */
  private replay(existing: ShardRecord, request: ShardRequest): ShardRecord {
    if (fingerprintOfRecord(existing) !== fingerprintOfRequest(request)) {
      throw new ConflictError(
        `idempotency key "${request.idempotencyKey}" was used for a different shard (${existing.id}); use a new key`,
      );
    }
    return existing;
  }

  private async findByIdempotencyKey(
    teamId: string,
    key: string,
  ): Promise<ShardRecord | undefined> {
    const rows = await this.prisma.$queryRaw<ShardRecord[]>`
      SELECT ${SHARD_COLUMNS} FROM shard WHERE team_id = ${teamId}::uuid AND idempotency_key = ${key}`;
    return rows[0];
  }

  /**
   * Input that only the fleet can refuse: more GPUs than any host has, a model filter no GPU
   * passes. The cache is read again before refusing, so a host that just registered counts.
   */
  private async checkAgainstFleet(request: PlacementRequestInput, since: number): Promise<void> {
    let problems = this.fleetProblems(request);
    if (problems.length === 0) return;
    await this.cache.refreshedSince(since);
    problems = this.fleetProblems(request);
    if (problems.length > 0) throw new BadUserInputError(problems);
  }

  private fleetProblems(request: PlacementRequestInput): FieldProblem[] {
    const problems: FieldProblem[] = [];
    const largest = this.cache.maxGpusPerHost();
    if (largest > 0 && request.gpuCount > largest) {
      problems.push({
        field: 'input.gpuCount',
        message: `must be at most ${largest}: no host in the fleet has more GPUs, got ${request.gpuCount}`,
      });
    }
    const { include, exclude } = request.gpuModel;
    const models = this.cache.gpuModels();
    if (
      (include.length > 0 || exclude.length > 0) &&
      models.length > 0 &&
      !this.cache.anyGpuMatches(request.gpuModel)
    ) {
      problems.push({
        field: include.length > 0 ? 'input.gpuModelInclude' : 'input.gpuModelExclude',
        message: `no GPU in the fleet matches the model filter; the fleet has ${models.map((m) => `"${m}"`).join(', ')}`,
      });
    }
    return problems;
  }

  // -------------------------------------------------------------------------------------
  // Reads

  async get(caller: Caller, id: string): Promise<ShardRecord> {
    const shardId = checkId('id', id);
    const shard = await this.prisma.shard.findUnique({ where: { id: shardId } });
    if (shard === null || !canSeeTeam(caller, shard.teamId)) throw new NotFoundError('shard', id);
    return shard;
  }

  /** Newest first. Team tokens see only their team's shards, whatever `teamId` says. */
  async list(caller: Caller, args: ShardsArgs): Promise<ConnectionShape<ShardRecord>> {
    const page = pageRequest(args);
    const teamFilter = typeof args.teamId === 'string' ? checkId('teamId', args.teamId) : undefined;
    if (caller.role !== Role.ADMIN && teamFilter !== undefined && teamFilter !== caller.teamId) {
      return { edges: [], pageInfo: emptyPageInfo(page.afterKey !== undefined) };
    }
    const teamId = caller.role === Role.ADMIN ? teamFilter : caller.teamId;
    const after = page.afterKey === undefined ? undefined : decodeShardKey(page.afterKey);
    const rows = await this.prisma.shard.findMany({
      where: {
        ...(teamId === undefined ? {} : { teamId }),
        ...(args.states && args.states.length > 0 ? { state: { in: args.states } } : {}),
        ...(typeof args.hostId === 'string' ? { hostId: args.hostId } : {}),
        ...(after === undefined
          ? {}
          : {
              OR: [
                { createdAt: { lt: after.createdAt } },
                { createdAt: after.createdAt, id: { lt: after.id } },
              ],
            }),
      },
      orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
      take: page.take,
    });
    const slice = rows.slice(0, page.take - 1);
    const edges = slice.map((node) => ({ cursor: encodeCursor(shardKeyOf(node)), node }));
    return {
      edges,
      pageInfo: {
        hasNextPage: rows.length > slice.length,
        hasPreviousPage: page.afterKey !== undefined,
        startCursor: edges[0]?.cursor ?? null,
        endCursor: edges.at(-1)?.cursor ?? null,
      },
    };
  }

  /** Its latest reservation on each GPU (live unless the shard stopped), by GPU index. */
  async gpusOf(shardId: string): Promise<ShardGpu[]> {
    const rows = await this.prisma.$queryRaw<GpuRow[]>`
      SELECT DISTINCT ON (held.gpu_uuid)
             held.gpu_uuid AS "gpuUuid", gpu.index, gpu.model,
             held.reserved_bytes AS "reservedBytes", held.used_bytes AS "usedBytes",
             held.reserved_at AS "reservedAt", held.released_at AS "releasedAt"
        FROM shard_gpu held JOIN gpu ON gpu.uuid = held.gpu_uuid
       WHERE held.shard_id = ${shardId}::uuid
       ORDER BY held.gpu_uuid, held.reserved_at DESC`;
    return rows
      .sort((a, b) => a.index - b.index)
      .map((row) => ({
        gpuUuid: row.gpuUuid,
        index: row.index,
        model: row.model,
        reserved: sizeOf(row.reservedBytes),
        used: sizeOf(row.usedBytes),
        reservedAt: row.reservedAt,
        releasedAt: row.releasedAt,
      }));
  }

  /** Where the request would go now (on the cached fleet), or every host's reason why not. */
  async preview(caller: Caller, input: PlacementInput): Promise<PlacementPreview> {
    const started = performance.now();
    const request = checkPlacementInput(input);
    const teamId =
      caller.role === Role.ADMIN && !input.teamId ? undefined : targetTeam(caller, input.teamId);
    await this.checkAgainstFleet(request, started);
    let policy: QuotaPolicy | undefined;
    let quotaProblem: string | null = null;
    if (teamId !== undefined) {
      const team = await readTeamState(this.prisma, teamId, null);
      if (team === undefined) throw new NotFoundError('team', teamId);
      policy = quotaPolicyOf(team);
      const decision = evaluateQuota(request, usageOf(team), policy);
      if (!decision.allowed) quotaProblem = decision.message;
    }
    const result = this.placement.preview(placementRequestOf(request, policy));
    if (result.kind === 'placed') {
      const host = this.cache.hosts().find((h) => h.id === result.hostId);
      return {
        fits: true,
        hostId: result.hostId,
        hostName: host?.name ?? result.hostId,
        gpuUuids: [...result.gpuUuids],
        reservedPerGpu: sizeOf(result.reservedBytesPerGpu),
        message:
          `fits on ${host?.name ?? result.hostId}: ${result.gpuUuids.length} GPU` +
          `${result.gpuUuids.length === 1 ? '' : 's'} × ${formatSize(result.reservedBytesPerGpu)} reserved`,
        hosts: [],
        quotaProblem,
      };
    }
    const error = noCapacityError(result);
    const hosts = (
      error.extensions['hosts'] as { hostId: string; hostName: string; reason: string }[]
    ).map((host, i) => ({ ...host, kind: result.reasons[i]!.reason.kind }));
    return {
      fits: false,
      hostId: null,
      hostName: null,
      gpuUuids: [],
      reservedPerGpu: null,
      message: result.message,
      hosts,
      quotaProblem,
    };
  }

  /** State changes of the caller's team's shards (admins: every team, or `teamId`). */
  subscribe(
    caller: Caller,
    teamIdArgument: string | null | undefined,
  ): AsyncIterableIterator<ShardEvent> {
    let teamId: string | undefined;
    if (typeof teamIdArgument === 'string') {
      teamId = checkId('teamId', teamIdArgument);
      assertTeamVisible(caller, teamId, 'team', teamIdArgument);
    } else if (caller.role !== Role.ADMIN) {
      teamId = caller.teamId;
    }
    const source = this.events.subscribe(
      (event) => teamId === undefined || event.shard.teamId === teamId,
    );
    const iterator: AsyncIterableIterator<ShardEvent> = {
      next: async () => {
        const next = await source.next();
        if (next.done === true) return { value: undefined, done: true };
        const event = next.value;
        return {
          value: {
            shard: shardView(event.shard),
            previousState: event.previousState as ShardState | null,
            state: event.state as ShardState,
            at: event.at,
          },
          done: false,
        };
      },
      return: async () => {
        await source.return?.();
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  // -------------------------------------------------------------------------------------
  // stop, delete, resize

  /**
   * PLACED, STARTING or RUNNING → STOPPING, and the agent is told to stop it; the reservation
   * is released when the agent reports it stopped. On an OFFLINE host (or a LOST shard) it
   * becomes STOPPED at once. Already stopping or ended: unchanged.
   */
  async stop(
    caller: Caller,
    id: string,
    graceSeconds = DEFAULT_STOP_GRACE_SECONDS,
  ): Promise<ShardRecord> {
    const shardId = checkId('id', id);
    if (
      !Number.isInteger(graceSeconds) ||
      graceSeconds < 0 ||
      graceSeconds > MAX_STOP_GRACE_SECONDS
    ) {
      throw BadUserInputError.of(
        'graceSeconds',
        `must be a whole number from 0 to ${MAX_STOP_GRACE_SECONDS}, got ${graceSeconds}`,
      );
    }
    const effects = new CommitEffects();
    const shard = await this.prisma.$transaction(async (tx) => {
      const shard = await this.lockVisible(tx, caller, shardId, id);
      if (shard.state === 'DELETED') throw new ConflictError(`shard ${id} is deleted`);
      if (
        shard.state === 'LOST' ||
        shard.state === 'PLACED' ||
        shard.state === 'STARTING' ||
        shard.state === 'RUNNING'
      ) {
        const hostGone = shard.state === 'LOST' || (await hostIsOffline(tx, shard.hostId));
        const next: ShardState = hostGone ? 'STOPPED' : 'STOPPING';
        const updated = await this.lifecycle.moveTo(tx, shard, next, {}, effects);
        await this.audit.record(tx, caller, {
          action: 'shard.stop',
          targetType: 'Shard',
          targetId: shard.id,
          teamId: shard.teamId,
          details: { from: shard.state, to: next, graceSeconds },
        });
        if (next === 'STOPPING' && shard.hostId !== null) {
          const hostId = shard.hostId;
          effects.command({ shardId, hostId, command: 'stop' }, (commands) =>
            commands.stop(hostId, shardId, graceSeconds),
          );
        }
        return updated;
      }
      return shard;
    });
    this.lifecycle.afterCommit(effects);
    return shard;
  }

  /** Any state → DELETED (the row stays): reservations released, the agent told to remove it. */
  async delete(caller: Caller, id: string): Promise<ShardRecord> {
    const shardId = checkId('id', id);
    const effects = new CommitEffects();
    const shard = await this.prisma.$transaction(async (tx) => {
      const shard = await this.lockVisible(tx, caller, shardId, id);
      if (shard.state === 'DELETED') return shard;
      const updated = await this.lifecycle.moveTo(tx, shard, 'DELETED', {}, effects);
      await this.audit.record(tx, caller, {
        action: 'shard.delete',
        targetType: 'Shard',
        targetId: shard.id,
        teamId: shard.teamId,
        details: { from: shard.state },
      });
      if (shard.hostId !== null) {
        const hostId = shard.hostId;
        effects.command({ shardId, hostId, command: 'delete' }, (commands) =>
          commands.delete(hostId, shardId),
        );
      }
      return updated;
    });
    this.lifecycle.afterCommit(effects);
    return shard;
  }

  /**
   * A new memoryPerGpu on the same GPUs: quota checked again when it grows, each GPU's
   * reservation changed by the difference with a conditional update (NO_CAPACITY if any GPU
   * lacks room), the reservation intervals closed and reopened, and the agent told the new caps.
   */
  async resize(caller: Caller, id: string, memoryPerGpu: string): Promise<ShardRecord> {
    const shardId = checkId('id', id);
    const newBytes = BigInt(checkMemoryPerGpu('memoryPerGpu', memoryPerGpu));
    const effects = new CommitEffects();
    const unlocked = await this.prisma.shard.findUnique({ where: { id: shardId } });
    if (unlocked === null || !canSeeTeam(caller, unlocked.teamId))
      throw new NotFoundError('shard', id);
    const shard = await this.prisma.$transaction(async (tx) => {
      await lockTeamForUpdate(tx, unlocked.teamId);
      const shard = await this.lockVisible(tx, caller, shardId, id);
      if (!isReserving(shard.state) || shard.state === 'STOPPING') {
        throw new ConflictError(
          `only a PLACED, STARTING or RUNNING shard can be resized; shard ${id} is ${shard.state}`,
        );
      }
      if (newBytes === shard.bytesPerGpu) return shard;
      if (newBytes > shard.bytesPerGpu) {
        const team = await readTeamState(tx, shard.teamId, null);
        if (team === undefined) throw new NotFoundError('team', shard.teamId);
        const usage = usageOf(team);
        const withoutThis: TeamUsage = {
          reservedBytes: bytes(usage.reservedBytes - Number(shard.bytesPerGpu) * shard.gpuCount),
          shardCount: usage.shardCount - 1,
        };
        const decision = evaluateQuota(
          { bytesPerGpu: bytes(Number(newBytes)), gpuCount: shard.gpuCount },
          withoutThis,
          { ...quotaPolicyOf(team), allowedGpuModels: undefined },
        );
        if (!decision.allowed) throw quotaError(decision);
      }
      const overhead = shard.limitBytesPerGpu - shard.bytesPerGpu;
      const newLimit = newBytes + overhead;
      const delta = newLimit - shard.limitBytesPerGpu;
      const live = await tx.$queryRaw<{ uuid: string; usedBytes: bigint }[]>`
        SELECT gpu_uuid AS uuid, used_bytes AS "usedBytes" FROM shard_gpu
         WHERE shard_id = ${shardId}::uuid AND released_at IS NULL ORDER BY gpu_uuid`;
      // The agent refuses a cap under what the container holds, and the reservation must
      // never shrink under it either (the freed bytes would be placed twice).
      const heldPastCap = live.find((gpu) => gpu.usedBytes > newLimit);
      if (heldPastCap !== undefined) {
        throw new ConflictError(
          `shard ${id} holds ${formatSize(Number(heldPastCap.usedBytes))} on GPU ` +
            `${heldPastCap.uuid}, more than the ${formatSize(Number(newLimit))} cap ` +
            `${formatSize(Number(newBytes))} per GPU would give it; free memory in the shard first`,
        );
      }
      const uuids = live.map((gpu) => gpu.uuid);
      const changed = await tx.$queryRaw<{ uuid: string }[]>`
        UPDATE gpu SET reserved_bytes = reserved_bytes + ${delta}
         WHERE uuid = ANY(${uuids}::text[])
           AND reserved_bytes + ${delta} <= floor(total_bytes * overcommit_ratio)
        RETURNING uuid`;
      if (changed.length !== uuids.length) {
        throw await this.resizeMisfit(tx, shard, uuids, delta, newBytes);
      }
      await tx.$executeRaw`
        UPDATE shard_gpu SET released_at = now()
         WHERE shard_id = ${shardId}::uuid AND released_at IS NULL`;
      await this.lifecycle.openReservations(
        tx,
        shardId,
        uuids,
        newLimit,
        live.map((gpu) => gpu.usedBytes),
      );
      const rows = await tx.$queryRaw<ShardRecord[]>`
        UPDATE shard SET bytes_per_gpu = ${newBytes}, limit_bytes_per_gpu = ${newLimit},
                         version = version + 1, updated_at = now()
         WHERE id = ${shardId}::uuid
        RETURNING ${SHARD_COLUMNS}`;
      await this.audit.record(tx, caller, {
        action: 'shard.resize',
        targetType: 'Shard',
        targetId: shardId,
        teamId: shard.teamId,
        details: {
          fromBytesPerGpu: String(shard.bytesPerGpu),
          toBytesPerGpu: String(newBytes),
          limitBytesPerGpu: String(newLimit),
        },
      });
      for (const uuid of uuids) effects.gpuDeltas.push({ uuid, bytes: Number(delta) });
      if (shard.hostId !== null) {
        const hostId = shard.hostId;
        const gpus = uuids.map((uuid) => ({ uuid, limitBytes: Number(newLimit) }));
        effects.command({ shardId, hostId, command: 'resize' }, (commands) =>
          commands.resize(hostId, shardId, gpus),
        );
      }
      return rows[0]!;
    });
    this.lifecycle.afterCommit(effects);
    return shard;
  }

  /** NO_CAPACITY for a resize that does not fit, naming each GPU's room. */
  private async resizeMisfit(
    tx: Prisma.TransactionClient,
    shard: ShardRecord,
    uuids: readonly string[],
    delta: bigint,
    newBytes: bigint,
  ): Promise<NoCapacityError> {
    const gpus = await tx.$queryRaw<{ uuid: string; index: number; free: bigint }[]>`
      SELECT uuid, index,
             greatest(floor(total_bytes * overcommit_ratio)::bigint - reserved_bytes, 0)::bigint AS free
        FROM gpu WHERE uuid = ANY(${[...uuids]}::text[]) ORDER BY index`;
    const host = await tx.host.findUnique({ where: { id: shard.hostId ?? '' } });
    const short = gpus.filter((gpu) => gpu.free < delta);
    const reason =
      `needs ${formatSize(Number(delta))} more on each of its GPUs; ` +
      short.map((gpu) => `#${gpu.index} has ${formatSize(Number(gpu.free))} free`).join(', ');
    return new NoCapacityError(
      `shard ${shard.id} cannot grow to ${formatSize(Number(newBytes))} per GPU on its GPUs: ${reason}`,
      [{ hostId: shard.hostId ?? '', hostName: host?.name ?? shard.hostId ?? '', reason }],
    );
  }

  private async lockVisible(
    tx: Prisma.TransactionClient,
    caller: Caller,
    shardId: string,
    id: string,
  ): Promise<ShardRecord> {
    const shard = await this.lifecycle.lock(tx, shardId);
    if (shard === undefined || !canSeeTeam(caller, shard.teamId))
      throw new NotFoundError('shard', id);
    return shard;
  }
}

// ---------------------------------------------------------------------------------------
// Helpers

/** The team a request acts for: admins must name it; others get theirs and may name no other. */
function targetTeam(caller: Caller, teamId: string | null | undefined): string {
  if (caller.role === Role.ADMIN) {
    if (typeof teamId !== 'string') {
      throw BadUserInputError.of('input.teamId', 'admins must name the team the shard is for');
    }
    return checkId('input.teamId', teamId);
  }
  if (typeof teamId !== 'string') return caller.teamId;
  const id = checkId('input.teamId', teamId);
  assertTeamVisible(caller, id, 'team', teamId);
  return id;
}

async function readTeamState(
  reader: Pick<Prisma.TransactionClient, '$queryRaw'>,
  teamId: string,
  idempotencyKey: string | null,
): Promise<TeamState | undefined> {
  const rows = await reader.$queryRaw<TeamState[]>`
    SELECT quota.team_id IS NOT NULL AS "hasPolicy",
           quota.max_total_bytes AS "maxTotalBytes", quota.max_shards AS "maxShards",
           quota.max_bytes_per_shard AS "maxBytesPerShard",
           quota.max_gpus_per_shard AS "maxGpusPerShard",
           quota.allowed_gpu_models AS "allowedGpuModels", quota.priority,
           held.shards AS "shardCount", held.bytes AS "reservedBytes",
           (SELECT id::text FROM shard
             WHERE team_id = team.id AND idempotency_key = ${idempotencyKey}) AS "existingId"
      FROM team
      LEFT JOIN quota_policy quota ON quota.team_id = team.id
      CROSS JOIN LATERAL (
        SELECT count(*)::int AS shards,
               coalesce(sum(bytes_per_gpu * gpu_count), 0)::bigint AS bytes
          FROM shard
         WHERE shard.team_id = team.id
           AND shard.state = ANY(${[...LIVE_SHARD_STATES]}::shard_state[])
      ) held
     WHERE team.id = ${teamId}::uuid`;
  return rows[0];
}

/**
 * The statement of a createShard (see ReserveStatement): the conditional GPU update, then, only
 * if it took every GPU, the shard (PLACED), its reservations and its audit row "shard.create".
 */
function insertShardStatement(
  caller: Caller,
  teamId: string,
  shardId: string,
  request: ShardRequest,
  placed: Placed,
): Prisma.Sql {
  const limit = BigInt(placed.reservedBytesPerGpu);
  const details = {
    name: request.name,
    image: request.image,
    hostId: placed.hostId,
    gpuUuids: [...placed.gpuUuids],
    bytesPerGpu: String(request.bytesPerGpu),
    limitBytesPerGpu: String(placed.reservedBytesPerGpu),
    gpuCount: request.gpuCount,
    idempotencyKey: request.idempotencyKey,
  };
  return Prisma.sql`
    WITH ${takeCapacityCtes(placed)},
    complete AS (
      SELECT count(*) = ${placed.gpuUuids.length} AS ok FROM taken
    ), inserted AS (
      INSERT INTO shard (id, team_id, name, image, command, env, bytes_per_gpu, gpu_count,
                         limit_bytes_per_gpu, gpu_model_include, gpu_model_exclude,
                         host_selector, placement_policy, state, host_id, idempotency_key,
                         updated_at)
      SELECT ${shardId}::uuid, ${teamId}::uuid, ${request.name}, ${request.image},
             ${request.command}::text[], ${JSON.stringify(request.env)}::jsonb,
             ${BigInt(request.bytesPerGpu)}, ${request.gpuCount}, ${limit},
             ${request.gpuModel.include}::text[], ${request.gpuModel.exclude}::text[],
             ${JSON.stringify(request.hostSelector)}::jsonb,
             ${request.policy}::placement_policy, 'PLACED', ${placed.hostId},
             ${request.idempotencyKey}, now()
       WHERE (SELECT ok FROM complete)
      RETURNING *
    ), reservations AS (
      INSERT INTO shard_gpu (shard_id, gpu_uuid, reserved_bytes, reserved_at)
      SELECT ${shardId}::uuid, uuid, ${limit}, now() FROM taken WHERE (SELECT ok FROM complete)
    ), audit AS (
      INSERT INTO audit_event (id, actor_token_id, actor_role, team_id, action, target_type,
                               target_id, details)
      SELECT ${randomUUID()}::uuid, ${caller.tokenId}::uuid, ${caller.role}::token_role,
             ${teamId}::uuid, 'shard.create', 'Shard', ${shardId}, ${JSON.stringify(details)}::jsonb
       WHERE (SELECT ok FROM complete)
    )
    SELECT (SELECT array_agg(uuid) FROM taken) AS "takenUuids", ${SHARD_COLUMNS}
      FROM (SELECT 1) AS one LEFT JOIN inserted AS shard ON true`;
}

/**
 * The team's policy in libs/limits terms. No policy row: the team may place nothing (every
 * limit 0). An empty allowedGpuModels column means every model.
 */
function quotaPolicyOf(team: TeamState): QuotaPolicy {
  if (!team.hasPolicy) {
    return { maxShards: 0, maxTotalBytes: bytes(0), priority: 0 };
  }
  return {
    maxTotalBytes: bytes(Number(team.maxTotalBytes ?? 0n)),
    maxShards: team.maxShards ?? 0,
    maxBytesPerShard: bytes(Number(team.maxBytesPerShard ?? 0n)),
    ...(team.maxGpusPerShard === null ? {} : { maxGpusPerShard: team.maxGpusPerShard }),
    ...(team.allowedGpuModels === null || team.allowedGpuModels.length === 0
      ? {}
      : { allowedGpuModels: team.allowedGpuModels }),
    priority: team.priority ?? 0,
  };
}

function usageOf(team: TeamState): TeamUsage {
  return { reservedBytes: bytes(Number(team.reservedBytes)), shardCount: team.shardCount };
}

function quotaError(denial: QuotaDenial): QuotaExceededError {
  const { allowed: _allowed, code: _code, message, ...numbers } = denial;
  return new QuotaExceededError(message, numbers);
}

function placementRequestOf(
  request: PlacementRequestInput,
  policy: QuotaPolicy | undefined,
): PlacementRequest {
  let gpuModel: GpuModelFilter = request.gpuModel;
  if (policy !== undefined) {
    const effective = effectiveGpuModelFilter(request.gpuModel, policy);
    if (effective.ok) gpuModel = effective.filter;
  }
  return {
    bytesPerGpu: bytes(request.bytesPerGpu),
    gpuCount: request.gpuCount,
    gpuModel,
    hostSelector: request.hostSelector,
    policy: request.policy === 'SPREAD' ? 'spread' : 'binpack',
  };
}

async function hostIsOffline(
  tx: Prisma.TransactionClient,
  hostId: string | null,
): Promise<boolean> {
  if (hostId === null) return true;
  const host = await tx.host.findUnique({ where: { id: hostId }, select: { state: true } });
  return host === null || host.state === 'OFFLINE';
}

function sortedRecord(record: Readonly<Record<string, string>>): [string, string][] {
  return Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** What a createShard asked for, to tell a retry from a different request under one key. */
function fingerprintOfRequest(request: ShardRequest): string {
  return JSON.stringify([
    request.name,
    request.image,
    request.command,
    sortedRecord(request.env),
    request.bytesPerGpu,
    request.gpuCount,
    request.gpuModel.include,
    request.gpuModel.exclude,
    sortedRecord(request.hostSelector),
    request.policy,
  ]);
}

function fingerprintOfRecord(shard: ShardRecord): string {
  return JSON.stringify([
    shard.name,
    shard.image,
    shard.command,
    sortedRecord(stringRecord(shard.env)),
    Number(shard.bytesPerGpu),
    shard.gpuCount,
    shard.gpuModelInclude,
    shard.gpuModelExclude,
    sortedRecord(stringRecord(shard.hostSelector)),
    shard.placementPolicy,
  ]);
}

/** Shards are listed newest first; the cursor holds (createdAt, id). */
function shardKeyOf(shard: Pick<ShardRecord, 'createdAt' | 'id'>): string {
  return `${shard.createdAt.toISOString()}|${shard.id}`;
}

function decodeShardKey(key: string): { createdAt: Date; id: string } {
  const [at, id] = key.split('|');
  const createdAt = new Date(at ?? '');
  if (id === undefined || Number.isNaN(createdAt.getTime())) {
    throw BadUserInputError.of('after', 'is not a cursor returned by this API');
  }
  return { createdAt, id: checkId('after', id) };
}

function emptyPageInfo(hasPreviousPage: boolean) {
  return { hasNextPage: false, hasPreviousPage, startCursor: null, endCursor: null };
}

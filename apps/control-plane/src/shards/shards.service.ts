import { Injectable } from '@nestjs/common';
import {
  bytes,
  evaluateQuota,
  holdsReservation,
  type QuotaPolicy,
  type TeamUsage,
} from '@gpushards/limits';
import { performance } from 'node:perf_hooks';
import { AuditService } from '../audit/audit.service.js';
import { Role, type Caller } from '../auth/caller.js';
import { assertTeamVisible, canSeeTeam } from '../auth/team-scope.js';
import { lockTeamForUpdate, Prisma, PrismaService, type ShardState } from '../database/index.js';
import {
  BadUserInputError,
  ConflictError,
  NoCapacityError,
  NotFoundError,
  type FieldProblem,
} from '../errors/domain-errors.js';
import { ShardEventBus } from '../events/shard-event-bus.js';
import { encodeCursor, pageRequest, type ConnectionShape } from '../graphql/connection.js';
import { sizeOf } from '../graphql/size.model.js';
import { FleetCache } from '../placement/fleet-cache.js';
import { noCapacityError, PlacementService } from '../placement/placement.service.js';
import { formatSize } from '../validation/sizes.js';
import { checkId } from '../validation/input.js';
import { ShardCreator } from './shard-creator.js';
import { CommitEffects, ShardLifecycle } from './shard-lifecycle.js';
import {
  checkCreateShardInput,
  checkMemoryPerGpu,
  checkPlacementInput,
  type PlacementRequestInput,
} from './shard-input.js';
import { SHARD_COLUMNS, type ShardRecord } from './shard-record.js';
import { TickBatch } from '../graphql/tick-batch.js';
import {
  shardView,
  type CreateShardInput,
  type PlacementInput,
  type PlacementPreview,
  type ShardEvent,
  type ShardGpu,
  type ShardsArgs,
} from './shard.model.js';
import {
  placementRequestOf,
  quotaError,
  quotaPolicyOf,
  readTeamState,
  usageOf,
} from './team-quota.js';

/** Default seconds between SIGTERM and SIGKILL for stopShard. */
export const DEFAULT_STOP_GRACE_SECONDS = 30;
const MAX_STOP_GRACE_SECONDS = 600;

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
  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly placement: PlacementService,
    private readonly cache: FleetCache,
    private readonly creator: ShardCreator,
    private readonly lifecycle: ShardLifecycle,
    private readonly events: ShardEventBus,
  ) {}

  // -------------------------------------------------------------------------------------
  // createShard

  /**
   * Validates, then hands the call to ShardCreator: in one transaction (shared with other
   * calls that arrive meanwhile) team lock, idempotency, quota, placement with the conditional
   * reservation, the shard row (PLACED) and its audit event. After commit the host's agent is
   * told to launch it.
   */
  async create(caller: Caller, input: CreateShardInput): Promise<ShardRecord> {
    const started = performance.now();
    const request = checkCreateShardInput(input);
    const teamId = targetTeam(caller, input.teamId);
    await this.checkAgainstFleet(request, started);
    return (await this.creator.create(caller, teamId, request, started)).shard;
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
  gpusOf(shardId: string): Promise<ShardGpu[]> {
    return this.gpuReservations.load(shardId);
  }

  /** Shard.gpus of every shard asked for in one tick: one query for a page of shards. */
  private readonly gpuReservations = new TickBatch<string, ShardGpu[]>(
    async (shardIds) => {
      const rows = await this.prisma.$queryRaw<(GpuRow & { shardId: string })[]>`
        SELECT DISTINCT ON (held.shard_id, held.gpu_uuid)
               held.shard_id::text AS "shardId", held.gpu_uuid AS "gpuUuid", gpu.index,
               gpu.model, held.reserved_bytes AS "reservedBytes",
               held.used_bytes AS "usedBytes", held.reserved_at AS "reservedAt",
               held.released_at AS "releasedAt"
          FROM shard_gpu held JOIN gpu ON gpu.uuid = held.gpu_uuid
         WHERE held.shard_id = ANY(${[...shardIds]}::uuid[])
         ORDER BY held.shard_id, held.gpu_uuid, held.reserved_at DESC`;
      const byShard = new Map<string, ShardGpu[]>();
      for (const row of rows.sort((a, b) => a.index - b.index)) {
        const gpus = byShard.get(row.shardId) ?? [];
        byShard.set(row.shardId, gpus);
        gpus.push({
          gpuUuid: row.gpuUuid,
          index: row.index,
          model: row.model,
          reserved: sizeOf(row.reservedBytes),
          used: sizeOf(row.usedBytes),
          reservedAt: row.reservedAt,
          releasedAt: row.releasedAt,
        });
      }
      return byShard;
    },
    () => [],
  );

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
      const team = await readTeamState(this.prisma, teamId);
      if (team === undefined) throw new NotFoundError('team', teamId);
      policy = quotaPolicyOf(team);
      const decision = evaluateQuota(request, usageOf(team), policy);
      if (!decision.allowed) quotaProblem = decision.message;
    }
    const result = this.placement.place(placementRequestOf(request, policy));
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
        const cause = next === 'STOPPING' ? 'stop-requested' : 'stopped';
        const updated = await this.lifecycle.moveTo(tx, shard, next, cause, {}, effects);
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
      const updated = await this.lifecycle.moveTo(tx, shard, 'DELETED', 'deleted', {}, effects);
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
      if (!holdsReservation(shard.state) || shard.state === 'STOPPING') {
        throw new ConflictError(
          `only a PLACED, STARTING or RUNNING shard can be resized; shard ${id} is ${shard.state}`,
        );
      }
      if (newBytes === shard.bytesPerGpu) return shard;
      if (newBytes > shard.bytesPerGpu) {
        const team = await readTeamState(tx, shard.teamId);
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

async function hostIsOffline(
  tx: Prisma.TransactionClient,
  hostId: string | null,
): Promise<boolean> {
  if (hostId === null) return true;
  const host = await tx.host.findUnique({ where: { id: hostId }, select: { state: true } });
  return host === null || host.state === 'OFFLINE';
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

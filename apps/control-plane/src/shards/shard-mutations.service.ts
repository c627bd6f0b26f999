import { Injectable } from '@nestjs/common';
import {
  bytes,
  evaluateQuota,
  holdsReservation,
  startDecision,
  type TeamUsage,
} from '@gpushards/limits';
import { performance } from 'node:perf_hooks';
import { AuditService } from '../audit/audit.service.js';
import type { Caller } from '../auth/caller.js';
import { canSeeTeam } from '../auth/team-scope.js';
import { lockTeamForUpdate, Prisma, PrismaService, type ShardState } from '../database/index.js';
import {
  BadUserInputError,
  ConflictError,
  NoCapacityError,
  NotFoundError,
  QuotaExceededError,
} from '../errors/domain-errors.js';
import { LifecycleMetrics } from '../metrics/lifecycle-metrics.js';
import { checkId } from '../validation/input.js';
import { SecretBox } from '../secrets/secret-box.js';
import { formatSize } from '../validation/sizes.js';
import { ShardCreator } from './shard-creator.js';
import { ShardFleetCheck } from './shard-fleet-check.js';
import { checkCreateShardInput, checkMemoryPerGpu } from './shard-input.js';
import { LaunchPolicy } from './launch-policy.js';
import { CommitEffects, ShardLifecycle } from './shard-lifecycle.js';
import { SHARD_COLUMNS, type ShardRecord } from './shard-record.js';
import type { CreateShardInput } from './shard-input.model.js';
import { targetTeam } from './target-team.js';
import {
  archivedTeamError,
  quotaError,
  quotaPolicyOf,
  readTeamState,
  readTeamStates,
  usageOf,
} from './team-quota.js';

/** Default seconds between SIGTERM and SIGKILL for stopShard. */
export const DEFAULT_STOP_GRACE_SECONDS = 30;
const MAX_STOP_GRACE_SECONDS = 600;
/** resizeShard changes these; a shard whose memory moves or is in host RAM must resume first. */
const RESIZABLE_STATES: ReadonlySet<ShardState> = new Set(['PLACED', 'STARTING', 'RUNNING']);

/** What changes shards: create, stop, delete, resize. */
@Injectable()
export class ShardMutationsService {
  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly creator: ShardCreator,
    private readonly lifecycle: ShardLifecycle,
    private readonly fleetCheck: ShardFleetCheck,
    private readonly launchPolicy: LaunchPolicy,
    private readonly secrets: SecretBox,
    private readonly metrics: LifecycleMetrics,
  ) {}

  /**
   * Validates, then hands the call to ShardCreator: in one transaction (shared with other
   * calls that arrive meanwhile) team lock, idempotency, quota, placement with the conditional
   * reservation, the shard row (PLACED) and its audit event. After commit the host's agent is
   * told to launch it.
   */
  async create(caller: Caller, input: CreateShardInput): Promise<ShardRecord> {
    const started = performance.now();
    const checked = checkCreateShardInput(input);
    // Sealed before anything else sees it: from here on only ciphertext is passed around.
    const request = { ...checked, secretEnv: this.secrets.sealAll(checked.secretEnv) };
    this.launchPolicy.check(request.image);
    const teamId = targetTeam(caller, input.teamId);
    if (request.elastic) await this.checkElasticAllowed(teamId);
    await this.fleetCheck.check(request, started);
    return (await this.creator.create(caller, teamId, request, started)).shard;
  }

  /**
   * An elastic shard needs its team's quota to allow it (docs/elastic.md). Read outside the
   * create's transaction: a quota changed meanwhile changes nothing a shard already holds.
   */
  private async checkElasticAllowed(teamId: string): Promise<void> {
    const policy = await this.prisma.quotaPolicy.findUnique({
      where: { teamId },
      select: { allowElastic: true },
    });
    if (policy?.allowElastic !== true) {
      throw new QuotaExceededError(
        `team ${teamId} may not have elastic shards: an admin allows them with setTeamQuota(allowElastic: true) (docs/elastic.md)`,
        { limit: 'allowElastic' },
      );
    }
  }

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
      const shard = await this.lifecycle.lockVisible(tx, caller, shardId, id);
      if (shard.state === 'DELETED') throw new ConflictError(`shard ${id} is deleted`);
      if (
        shard.state === 'LOST' ||
        shard.state === 'PLACED' ||
        shard.state === 'STARTING' ||
        shard.state === 'RUNNING' ||
        shard.state === 'SUSPENDING' ||
        shard.state === 'SUSPENDED' ||
        shard.state === 'RESUMING'
      ) {
        const hostGone = shard.state === 'LOST' || (await hostIsOffline(tx, shard.hostId));
        // A SUSPENDED shard holds no GPU: STOPPED at once, its container stopped by its agent
        // (docs/elastic.md).
        const next: ShardState = hostGone || shard.state === 'SUSPENDED' ? 'STOPPED' : 'STOPPING';
        const cause =
          next === 'STOPPING' || shard.state === 'SUSPENDED' ? 'stop-requested' : 'stopped';
        const updated = await this.lifecycle.moveTo(tx, shard, next, cause, {}, effects);
        await this.audit.record(tx, caller, {
          action: 'shard.stop',
          targetType: 'Shard',
          targetId: shard.id,
          teamId: shard.teamId,
          details: { from: shard.state, to: next, graceSeconds },
        });
        if ((next === 'STOPPING' || shard.state === 'SUSPENDED') && shard.hostId !== null) {
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

  /**
   * A shard whose run ended (STOPPED, EXITED, FAILED, PREEMPTED, EXPIRED: libs/limits
   * startDecision) runs again from its spec: PENDING (`start-requested`), placed by the queue
   * like any waiting shard, keeping its id, name, events and usage. Its team's quota is checked
   * again (it counts from now on) under the team's lock; an archived team's shards stay
   * stopped (CONFLICT). Already waiting or running: unchanged. Any other state: CONFLICT.
   */
  async start(caller: Caller, id: string): Promise<ShardRecord> {
    const shardId = checkId('id', id);
    const unlocked = await this.prisma.shard.findUnique({ where: { id: shardId } });
    if (unlocked === null || !canSeeTeam(caller, unlocked.teamId))
      throw new NotFoundError('shard', id);
    const effects = new CommitEffects();
    const shard = await this.prisma.$transaction(async (tx) => {
      const [team] = (
        await readTeamStates(tx, [unlocked.teamId], [], { lockAndFold: true })
      ).values();
      const shard = await this.lifecycle.lockVisible(tx, caller, shardId, id);
      const decision = startDecision(shard.state);
      if (decision.kind === 'unchanged') return shard;
      if (decision.kind === 'refused') throw new ConflictError(`shard ${id}: ${decision.message}`);
      if (team === undefined) throw new NotFoundError('team', shard.teamId);
      if (team.archived) throw archivedTeamError(shard.teamId);
      const quota = evaluateQuota(
        { bytesPerGpu: bytes(Number(shard.bytesPerGpu)), gpuCount: shard.gpuCount },
        usageOf(team),
        { ...quotaPolicyOf(team), allowedGpuModels: undefined },
      );
      if (!quota.allowed) throw quotaError(quota);
      // The last run's end is not this one's.
      await tx.$executeRaw`
        UPDATE shard SET stopped_at = NULL, exit_code = NULL, failure_reason = NULL,
                         expires_at = NULL, idle_since = NULL
         WHERE id = ${shardId}::uuid`;
      const updated = await this.lifecycle.moveTo(
        tx,
        shard,
        'PENDING',
        'start-requested',
        {},
        effects,
      );
      await this.audit.record(tx, caller, {
        action: 'shard.start',
        targetType: 'Shard',
        targetId: shard.id,
        teamId: shard.teamId,
        details: { from: shard.state, to: 'PENDING', hostId: shard.hostId },
      });
      return updated;
    });
    this.lifecycle.afterCommit(effects);
    if (effects.changes.length > 0) this.metrics.committed('shard.start');
    return shard;
  }

  /** Any state → DELETED (the row stays): reservations released, the agent told to remove it. */
  async delete(caller: Caller, id: string): Promise<ShardRecord> {
    const shardId = checkId('id', id);
    const effects = new CommitEffects();
    const shard = await this.prisma.$transaction(async (tx) => {
      const shard = await this.lifecycle.lockVisible(tx, caller, shardId, id);
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
      const shard = await this.lifecycle.lockVisible(tx, caller, shardId, id);
      if (!holdsReservation(shard.state) || !RESIZABLE_STATES.has(shard.state)) {
        throw new ConflictError(
          `only a PLACED, STARTING or RUNNING shard can be resized; shard ${id} is ${shard.state}` +
            (shard.state === 'SUSPENDING' || shard.state === 'SUSPENDED'
              ? ' (resume it first: its memory is in host RAM)'
              : ''),
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
        const quota = evaluateQuota(
          { bytesPerGpu: bytes(Number(newBytes)), gpuCount: shard.gpuCount },
          withoutThis,
          { ...quotaPolicyOf(team), allowedGpuModels: undefined },
        );
        if (!quota.allowed) throw quotaError(quota);
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
           AND gpu_memory_fits(total_bytes, reserved_bytes, suspended_bytes, unattributed_bytes,
                               overcommit_ratio, ${delta})
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
             greatest(least(total_bytes - unattributed_bytes - reserved_bytes,
                            floor(total_bytes * overcommit_ratio)::bigint - reserved_bytes
                              - suspended_bytes), 0)::bigint AS free
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
}

async function hostIsOffline(
  tx: Prisma.TransactionClient,
  hostId: string | null,
): Promise<boolean> {
  if (hostId === null) return true;
  const host = await tx.host.findUnique({ where: { id: hostId }, select: { state: true } });
  return host === null || host.state === 'OFFLINE';
}

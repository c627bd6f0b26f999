import { Inject, Injectable } from '@nestjs/common';
import {
  bytes,
  checkGuarantees,
  gpuUuid,
  hostId,
  priorityClasses,
  QUOTA_STATES,
  type Host,
  type HostState,
} from '@gpushards/limits';
import { AuditService } from '../audit/audit.service.js';
import { Role, type Caller } from '../auth/caller.js';
import { assertTeamVisible } from '../auth/team-scope.js';
import { PrismaService } from '../database/index.js';
import { ConflictError, NotFoundError, QuotaExceededError } from '../errors/domain-errors.js';
import { isUniqueViolation } from '../errors/prisma-errors.js';
import {
  pageRequest,
  toConnection,
  type ConnectionArgs,
  type ConnectionShape,
} from '../graphql/connection.js';
import type { BatchLoad, RequestLoaders } from '../graphql/request-loaders.js';
import { sizeOf } from '../graphql/size.model.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { checkId, GPU_MODEL_NAME, InputCheck, TEAM_NAME } from '../validation/input.js';
import type { QuotaPolicy, QuotaPolicyInput, Team, TeamUsage } from './team.model.js';

/** Shard states that count against the team's quota (libs/limits countsAgainstQuota). */
export const LIVE_SHARD_STATES = QUOTA_STATES;

const MAX_SHARDS_LIMIT = 100_000;
const MAX_GPUS_PER_SHARD_LIMIT = 1024;
const PRIORITY_RANGE = 1_000_000;
const MAX_ALLOWED_GPU_MODELS = 64;
const CLASSES = priorityClasses();
/** Serializes guarantee changes across replicas. */
const GUARANTEE_LOCK = 0x67707367; // "gpsg"

type Tx = Parameters<Parameters<PrismaService['$transaction']>[0]>[0];

/**
 * Refuses (QUOTA_EXCEEDED, naming the numbers) a guarantee that, with every other team's, the
 * fleet could not keep at once: per GPU model, guarantees ≤ floor(total × overcommit).
 */
async function checkGuaranteesFit(
  tx: Tx,
  teamId: string,
  guarantee: { bytes: ReturnType<typeof bytes>; gpus?: number; gpuModel?: string },
): Promise<void> {
  if (guarantee.bytes === 0 && (guarantee.gpus ?? 0) === 0) return;
  const others = await tx.$queryRaw<
    { teamId: string; name: string; bytes: bigint; gpus: number | null; model: string | null }[]
  >`
    SELECT team.id::text AS "teamId", team.name, quota.guarantee_bytes AS bytes,
           quota.guarantee_gpus AS gpus, quota.guarantee_gpu_model AS model
      FROM quota_policy quota JOIN team ON team.id = quota.team_id
     WHERE quota.team_id <> ${teamId}::uuid
       AND (quota.guarantee_bytes > 0 OR coalesce(quota.guarantee_gpus, 0) > 0)`;
  const [self] = await tx.$queryRaw<{ name: string }[]>`
    SELECT name FROM team WHERE id = ${teamId}::uuid`;
  const gpus = await tx.$queryRaw<
    {
      hostId: string;
      hostName: string;
      state: string;
      uuid: string;
      index: number;
      model: string;
      totalBytes: bigint;
      overcommitRatio: number;
    }[]
  >`
    SELECT host.id AS "hostId", host.name AS "hostName", host.state::text AS state, gpu.uuid,
           gpu.index, gpu.model, gpu.total_bytes AS "totalBytes",
           gpu.overcommit_ratio AS "overcommitRatio"
      FROM gpu JOIN host ON host.id = gpu.host_id
     WHERE gpu.missing_since IS NULL
     ORDER BY host.id, gpu.index`;
  const hosts = new Map<string, Host & { gpus: Host['gpus'][number][] }>();
  for (const gpu of gpus) {
    let host = hosts.get(gpu.hostId);
    if (host === undefined) {
      host = {
        id: hostId(gpu.hostId),
        name: gpu.hostName,
        state: gpu.state as HostState,
        labels: {},
        gpus: [],
      };
      hosts.set(gpu.hostId, host);
    }
    host.gpus.push({
      uuid: gpuUuid(gpu.uuid),
      index: gpu.index,
      model: gpu.model,
      totalBytes: bytes(Number(gpu.totalBytes)),
      reservedBytes: bytes(0),
      overcommitRatio: gpu.overcommitRatio,
    });
  }
  const result = checkGuarantees(
    [
      { teamId, teamName: self?.name ?? teamId, guarantee },
      ...others.map((other) => ({
        teamId: other.teamId,
        teamName: other.name,
        guarantee: {
          bytes: bytes(Number(other.bytes)),
          ...(other.gpus === null ? {} : { gpus: other.gpus }),
          ...(other.model === null ? {} : { gpuModel: other.model }),
        },
      })),
    ],
    [...hosts.values()],
  );
  if (!result.ok) {
    throw new QuotaExceededError(`guarantee refused: ${result.message}`, {
      limit: 'guarantee',
      guaranteed: result.guaranteed,
      capacity: result.capacity,
      terms: result.terms,
    });
  }
}

@Injectable()
export class TeamsService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'teams' });
  }

  /** Admins list every team, anyone else only their own; ordered by name. */
  async list(caller: Caller, args: ConnectionArgs): Promise<ConnectionShape<Team>> {
    const page = pageRequest(args);
    const rows = await this.prisma.team.findMany({
      where: {
        ...(caller.role === Role.ADMIN ? {} : { id: caller.teamId }),
        deletedAt: null,
        ...(page.afterKey === undefined ? {} : { name: { gt: page.afterKey } }),
      },
      orderBy: { name: 'asc' },
      take: page.take,
    });
    return toConnection(page, rows, (team) => team.name);
  }

  /** The team, if the caller may see it; NOT_FOUND otherwise, as if it did not exist. */
  async get(caller: Caller, id: string, field = 'id'): Promise<Team> {
    const teamId = checkId(field, id);
    assertTeamVisible(caller, teamId, 'team', id);
    const team = await this.prisma.team.findUnique({ where: { id: teamId } });
    if (team === null || team.deletedAt !== null) throw new NotFoundError('team', id);
    return team;
  }

  /** Like get, batched with the request's other team loads (Shard.team of a page). */
  async getLoaded(
    loaders: RequestLoaders,
    caller: Caller,
    id: string,
    field = 'id',
  ): Promise<Team> {
    const teamId = checkId(field, id);
    assertTeamVisible(caller, teamId, 'team', id);
    return loaders.load(this.teamsById, teamId);
  }

  private readonly teamsById: BatchLoad<string, Team> = {
    loadMany: async (ids) => {
      const rows = await this.prisma.team.findMany({ where: { id: { in: [...ids] } } });
      return new Map(rows.map((team) => [team.id, team]));
    },
    missing: (id) => new NotFoundError('team', id),
  };

  async quotaPolicy(teamId: string): Promise<QuotaPolicy | null> {
    const policy = await this.prisma.quotaPolicy.findUnique({ where: { teamId } });
    if (policy === null) return null;
    return {
      maxTotal: sizeOf(policy.maxTotalBytes),
      maxShards: policy.maxShards,
      maxPerShard: sizeOf(policy.maxBytesPerShard),
      maxGpusPerShard: policy.maxGpusPerShard,
      allowedGpuModels: policy.allowedGpuModels,
      allowedImages: policy.allowedImages,
      priority: policy.priority,
      guarantee: sizeOf(policy.guaranteeBytes),
      guaranteeGpus: policy.guaranteeGpus,
      guaranteeGpuModel: policy.guaranteeGpuModel,
      maxPriorityClass: policy.maxPriorityClass,
      maxComputeSharePercent: policy.maxComputeSharePercent,
      allowElastic: policy.allowElastic,
      updatedAt: policy.updatedAt,
    };
  }

  async usage(teamId: string): Promise<TeamUsage> {
    const [row] = await this.prisma.$queryRaw<{ shardCount: number; reservedBytes: bigint }[]>`
      SELECT count(*)::int AS "shardCount",
             coalesce(sum(bytes_per_gpu * gpu_count), 0)::bigint AS "reservedBytes"
        FROM shard
       WHERE team_id = ${teamId}::uuid
         AND state::text = ANY(${[...LIVE_SHARD_STATES]})`;
    return { reserved: sizeOf(row?.reservedBytes ?? 0n), shardCount: row?.shardCount ?? 0 };
  }

  async create(caller: Caller, name: string): Promise<Team> {
    const check = new InputCheck();
    check.name('name', name, TEAM_NAME);
    check.done();
    try {
      const team = await this.prisma.$transaction(async (tx) => {
        const created = await tx.team.create({ data: { name } });
        await this.audit.record(tx, caller, {
          action: 'team.create',
          targetType: 'Team',
          targetId: created.id,
          teamId: created.id,
          details: { name },
        });
        return created;
      });
      this.logger.info({ teamId: team.id, name, actorTokenId: caller.tokenId }, 'team created');
      return team;
    } catch (error) {
      if (isUniqueViolation(error))
        throw new ConflictError(`a team named "${name}" already exists`);
      throw error;
    }
  }

  /** Replaces the team's whole policy (fields left out take their defaults). */
  async setQuotaPolicy(caller: Caller, teamId: string, input: QuotaPolicyInput): Promise<Team> {
    const id = checkId('teamId', teamId);
    const check = new InputCheck();
    const maxTotalBytes = check.size('input.maxTotal', input.maxTotal, { allowZero: true });
    const maxBytesPerShard = check.size('input.maxPerShard', input.maxPerShard, {
      allowZero: true,
    });
    check.integer('input.maxShards', input.maxShards, 0, MAX_SHARDS_LIMIT);
    if (typeof input.maxGpusPerShard === 'number') {
      check.integer('input.maxGpusPerShard', input.maxGpusPerShard, 1, MAX_GPUS_PER_SHARD_LIMIT);
    }
    const priority = check.integer(
      'input.priority',
      input.priority ?? 0,
      -PRIORITY_RANGE,
      PRIORITY_RANGE,
    );
    const models = input.allowedGpuModels ?? [];
    if (models.length > MAX_ALLOWED_GPU_MODELS) {
      check.problem(
        'input.allowedGpuModels',
        `at most ${MAX_ALLOWED_GPU_MODELS} models, got ${models.length}`,
      );
    } else {
      models.forEach((model, i) =>
        check.name(`input.allowedGpuModels[${i}]`, model, GPU_MODEL_NAME),
      );
    }
    // Left out: the team keeps its list (forms that predate the field must not clear it).
    const images =
      input.allowedImages === undefined || input.allowedImages === null
        ? undefined
        : checkAllowedImages(check, input.allowedImages);
    const guaranteeBytes =
      input.guarantee === undefined || input.guarantee === null
        ? 0
        : check.size('input.guarantee', input.guarantee, { allowZero: true });
    if (guaranteeBytes > maxTotalBytes) {
      check.problem(
        'input.guarantee',
        `is more than maxTotal (${sizeOf(guaranteeBytes).human} > ${sizeOf(maxTotalBytes).human}); a team is guaranteed at most what it may hold`,
      );
    }
    if (typeof input.guaranteeGpus === 'number') {
      check.integer('input.guaranteeGpus', input.guaranteeGpus, 0, MAX_GPUS_PER_SHARD_LIMIT * 1000);
    }
    const guaranteeGpuModel = input.guaranteeGpuModel ?? null;
    if (guaranteeGpuModel !== null) {
      check.name('input.guaranteeGpuModel', guaranteeGpuModel, GPU_MODEL_NAME);
    }
    const maxPriorityClass = input.maxPriorityClass ?? null;
    if (maxPriorityClass !== null && CLASSES.get(maxPriorityClass) === undefined) {
      check.problem(
        'input.maxPriorityClass',
        `must be one of ${CLASSES.list.map((c) => `"${c.name}"`).join(', ')}, got "${maxPriorityClass}"`,
      );
    }
    const maxComputeSharePercent = input.maxComputeSharePercent ?? null;
    if (maxComputeSharePercent !== null) {
      check.integer('input.maxComputeSharePercent', maxComputeSharePercent, 0, 100);
    }
    if (maxBytesPerShard > maxTotalBytes) {
      check.problem(
        'input.maxPerShard',
        `is more than maxTotal (${sizeOf(maxBytesPerShard).human} > ${sizeOf(maxTotalBytes).human}); one shard can never hold more than the whole team`,
      );
    }
    check.done();

    const team = await this.get(caller, id, 'teamId');
    const policy = {
      maxTotalBytes: BigInt(maxTotalBytes),
      maxShards: input.maxShards,
      maxBytesPerShard: BigInt(maxBytesPerShard),
      maxGpusPerShard: input.maxGpusPerShard ?? null,
      allowedGpuModels: [...new Set(models)],
      ...(images === undefined ? {} : { allowedImages: images }),
      priority,
      guaranteeBytes: BigInt(guaranteeBytes),
      guaranteeGpus: input.guaranteeGpus ?? null,
      guaranteeGpuModel,
      maxPriorityClass,
      maxComputeSharePercent,
      // Left out: the team keeps its setting.
      ...(typeof input.allowElastic === 'boolean' ? { allowElastic: input.allowElastic } : {}),
    };
    await this.prisma.$transaction(async (tx) => {
      // Guarantee changes one at a time, so that two of them cannot each fit alone.
      await tx.$queryRaw`SELECT 1 AS locked FROM pg_advisory_xact_lock(${GUARANTEE_LOCK}::bigint)`;
      await checkGuaranteesFit(tx, id, {
        bytes: bytes(guaranteeBytes),
        ...(policy.guaranteeGpus === null ? {} : { gpus: policy.guaranteeGpus }),
        ...(guaranteeGpuModel === null ? {} : { gpuModel: guaranteeGpuModel }),
      });
      await tx.quotaPolicy.upsert({
        where: { teamId: id },
        create: { teamId: id, ...policy },
        update: policy,
      });
      await this.audit.record(tx, caller, {
        action: 'quota.set',
        targetType: 'Team',
        targetId: id,
        teamId: id,
        details: {
          ...policy,
          maxTotalBytes: String(maxTotalBytes),
          maxBytesPerShard: String(maxBytesPerShard),
          guaranteeBytes: String(guaranteeBytes),
        },
      });
    });
    this.logger.info({ teamId: id, actorTokenId: caller.tokenId }, 'quota policy set');
    return team;
  }
}

/** At most this many image prefixes per team. */
export const MAX_ALLOWED_IMAGES = 64;
const IMAGE_PREFIX = /^[A-Za-z0-9[][A-Za-z0-9._:/@[\]-]{0,254}$/;

function checkAllowedImages(check: InputCheck, prefixes: readonly string[]): string[] {
  if (prefixes.length > MAX_ALLOWED_IMAGES) {
    check.problem(
      'input.allowedImages',
      `at most ${MAX_ALLOWED_IMAGES} prefixes, got ${prefixes.length}`,
    );
    return [];
  }
  prefixes.forEach((prefix, i) => {
    if (!IMAGE_PREFIX.test(prefix)) {
      check.problem(
        `input.allowedImages[${i}]`,
        'must be an image prefix like "ghcr.io/acme/" or "registry.example.com:5000" (1 to 255 characters, no spaces)',
      );
    }
  });
  return [...new Set(prefixes)];
}

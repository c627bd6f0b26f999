import { Inject, Injectable } from '@nestjs/common';
import { QUOTA_STATES } from '@gpushards/limits';
import { AuditService } from '../audit/audit.service.js';
import { Role, type Caller } from '../auth/caller.js';
import { assertTeamVisible } from '../auth/team-scope.js';
import { PrismaService } from '../database/index.js';
import { ConflictError, NotFoundError } from '../errors/domain-errors.js';
import { isUniqueViolation } from '../errors/prisma-errors.js';
import {
  pageRequest,
  toConnection,
  type ConnectionArgs,
  type ConnectionShape,
} from '../graphql/connection.js';
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
    if (team === null) throw new NotFoundError('team', id);
    return team;
  }

  async quotaPolicy(teamId: string): Promise<QuotaPolicy | null> {
    const policy = await this.prisma.quotaPolicy.findUnique({ where: { teamId } });
    if (policy === null) return null;
    return {
      maxTotal: sizeOf(policy.maxTotalBytes),
      maxShards: policy.maxShards,
      maxPerShard: sizeOf(policy.maxBytesPerShard),
      maxGpusPerShard: policy.maxGpusPerShard,
      allowedGpuModels: policy.allowedGpuModels,
      priority: policy.priority,
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
      priority,
    };
    await this.prisma.$transaction(async (tx) => {
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
        },
      });
    });
    this.logger.info({ teamId: id, actorTokenId: caller.tokenId }, 'quota policy set');
    return team;
  }
}

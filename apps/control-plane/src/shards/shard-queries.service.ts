import { Injectable } from '@nestjs/common';
import { Role, type Caller } from '../auth/caller.js';
import { canSeeTeam } from '../auth/team-scope.js';
import { Prisma, PrismaService } from '../database/index.js';
import { BadUserInputError, NotFoundError } from '../errors/domain-errors.js';
import { pageRequest, toConnection, type ConnectionShape } from '../graphql/connection.js';
import { sizeOf } from '../graphql/size.model.js';
import type { BatchLoad, RequestLoaders } from '../graphql/request-loaders.js';
import { checkId } from '../validation/input.js';
import { SHARD_COLUMNS, type ShardRecord } from './shard-record.js';
import type { ShardGpu, ShardsArgs } from './shard.model.js';

interface GpuRow {
  gpuUuid: string;
  index: number;
  model: string;
  reservedBytes: bigint;
  usedBytes: bigint;
  realBytes: bigint | null;
  busyRatio: number | null;
  lastKernelAt: Date | null;
  reservedAt: Date;
  releasedAt: Date | null;
}

/** Reading shards: one, a page, and each one's GPU reservations. */
@Injectable()
export class ShardQueriesService {
  constructor(private readonly prisma: PrismaService) {}

  async get(caller: Caller, id: string): Promise<ShardRecord> {
    const shardId = checkId('id', id);
    const shard = await this.prisma.shard.findUnique({ where: { id: shardId } });
    if (shard === null || !canSeeTeam(caller, shard.teamId)) throw new NotFoundError('shard', id);
    return shard;
  }

  /** Newest first. Team tokens see only their team's shards, whatever `teamId` says. */
  async list(caller: Caller, args: ShardsArgs): Promise<ConnectionShape<ShardRecord>> {
    const page = pageRequest(args);
    const teamId = teamScopeOf(caller, args);
    if (teamId === NO_TEAM) return toConnection<ShardRecord>(page, [], shardKeyOf);
    const after = page.afterKey === undefined ? undefined : decodeShardKey(page.afterKey);
    const rows = await this.prisma.shard.findMany({
      where: {
        ...(teamId === undefined ? {} : { teamId }),
        ...(args.states && args.states.length > 0 ? { state: { in: args.states } } : {}),
        ...(typeof args.hostId === 'string' ? { hostId: args.hostId } : {}),
        ...(args.idle === true ? { idleSince: { not: null }, state: 'RUNNING' } : {}),
        ...(args.idle === false ? { idleSince: null } : {}),
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
    return toConnection(page, rows, shardKeyOf);
  }

  /**
   * Host.shards: the page of `hostId`'s shards that `list` would answer, batched with the
   * request's other hosts asked with the same arguments (a list of N hosts costs one query,
   * not N).
   */
  async listOnHost(
    loaders: RequestLoaders,
    caller: Caller,
    hostId: string,
    args: ShardsArgs,
  ): Promise<ConnectionShape<ShardRecord>> {
    const page = pageRequest(args);
    const teamId = teamScopeOf(caller, args);
    if (teamId === NO_TEAM) return toConnection<ShardRecord>(page, [], shardKeyOf);
    const after = page.afterKey === undefined ? undefined : decodeShardKey(page.afterKey);
    const filter: HostPageFilter = {
      teamId: teamId ?? null,
      states: args.states && args.states.length > 0 ? [...args.states].sort() : null,
      idle: typeof args.idle === 'boolean' ? args.idle : null,
      take: page.take,
      after:
        after === undefined ? null : { createdAt: after.createdAt.toISOString(), id: after.id },
    };
    const rows = await loaders.load(this.hostPages, JSON.stringify([filter, hostId]));
    return toConnection(page, rows, shardKeyOf);
  }

  /**
   * Keys are `[HostPageFilter, hostId]` as JSON: one query per distinct filter, each host's
   * first `take` rows by row_number() over the host (newest first, as `list` orders them).
   */
  private readonly hostPages: BatchLoad<string, ShardRecord[]> = {
    loadMany: async (keys) => {
      const byFilter = new Map<string, string[]>();
      for (const key of keys) {
        const [filter, hostId] = JSON.parse(key) as [HostPageFilter, string];
        const filterKey = JSON.stringify(filter);
        byFilter.set(filterKey, [...(byFilter.get(filterKey) ?? []), hostId]);
      }
      const pages = new Map<string, ShardRecord[]>();
      for (const [filterKey, hostIds] of byFilter) {
        const filter = JSON.parse(filterKey) as HostPageFilter;
        const byHost = new Map<string, ShardRecord[]>(hostIds.map((hostId) => [hostId, []]));
        for (const row of await this.pagesOnHosts(filter, hostIds)) {
          byHost.get(row.hostId ?? '')?.push(row);
        }
        for (const [hostId, rows] of byHost) pages.set(JSON.stringify([filter, hostId]), rows);
      }
      return pages;
    },
    missing: () => [],
  };

  private pagesOnHosts(filter: HostPageFilter, hostIds: string[]): Promise<ShardRecord[]> {
    const { after } = filter;
    const conditions = [
      Prisma.sql`shard.host_id = ANY(${hostIds}::text[])`,
      ...(filter.teamId === null ? [] : [Prisma.sql`shard.team_id = ${filter.teamId}::uuid`]),
      ...(filter.states === null
        ? []
        : [Prisma.sql`shard.state::text = ANY(${filter.states}::text[])`]),
      ...(filter.idle === true
        ? [Prisma.sql`shard.idle_since IS NOT NULL AND shard.state = 'RUNNING'`]
        : []),
      ...(filter.idle === false ? [Prisma.sql`shard.idle_since IS NULL`] : []),
      ...(after === null
        ? []
        : [
            Prisma.sql`(shard.created_at, shard.id) < (${after.createdAt}::timestamptz, ${after.id}::uuid)`,
          ]),
    ];
    return this.prisma.$queryRaw<ShardRecord[]>`
      SELECT ${SHARD_COLUMNS}
        FROM (SELECT shard.*, row_number() OVER (PARTITION BY shard.host_id
                                                 ORDER BY shard.created_at DESC, shard.id DESC)
                                AS place
                FROM shard
               WHERE ${Prisma.join(conditions, ' AND ')}) AS shard
       WHERE shard.place <= ${filter.take}
       ORDER BY shard.created_at DESC, shard.id DESC`;
  }

  /** Its latest reservation on each GPU (live unless the shard stopped), by GPU index. */
  gpusOf(loaders: RequestLoaders, shardId: string): Promise<ShardGpu[]> {
    return loaders.load(this.gpuReservations, shardId);
  }

  /** Shard.gpus of every shard of a request's page: one query for the page. */
  private readonly gpuReservations: BatchLoad<string, ShardGpu[]> = {
    loadMany: async (shardIds) => {
      const rows = await this.prisma.$queryRaw<(GpuRow & { shardId: string })[]>`
        SELECT DISTINCT ON (held.shard_id, held.gpu_uuid)
               held.shard_id::text AS "shardId", held.gpu_uuid AS "gpuUuid", gpu.index,
               gpu.model, held.reserved_bytes AS "reservedBytes",
               held.used_bytes AS "usedBytes", held.real_bytes AS "realBytes",
               held.busy_ratio AS "busyRatio", held.last_kernel_at AS "lastKernelAt",
               held.reserved_at AS "reservedAt",
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
          real: row.realBytes === null ? null : sizeOf(row.realBytes),
          busyRatio: row.busyRatio,
          lastKernelAt: row.lastKernelAt,
          reservedAt: row.reservedAt,
          releasedAt: row.releasedAt,
        });
      }
      return byShard;
    },
    missing: () => [],
  };
}

/** What a Host.shards page is asked with, but the host: its arguments, the caller's scope applied. */
interface HostPageFilter {
  readonly teamId: string | null;
  readonly states: string[] | null;
  readonly idle: boolean | null;
  readonly take: number;
  /** The cursor's sort key: createdAt as an ISO string (keys are JSON), and id. */
  readonly after: { readonly createdAt: string; readonly id: string } | null;
}

const NO_TEAM = Symbol('no team');

/**
 * The team whose shards `caller` may list with `args.teamId`: admins any (undefined: all),
 * team tokens their own; NO_TEAM when a team token names another team (an empty page).
 */
function teamScopeOf(caller: Caller, args: ShardsArgs): string | undefined | typeof NO_TEAM {
  const teamFilter = typeof args.teamId === 'string' ? checkId('teamId', args.teamId) : undefined;
  if (caller.role === Role.ADMIN) return teamFilter;
  return teamFilter !== undefined && teamFilter !== caller.teamId ? NO_TEAM : caller.teamId;
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

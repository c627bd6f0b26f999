import { Injectable } from '@nestjs/common';
import { Role, type Caller } from '../auth/caller.js';
import { canSeeTeam } from '../auth/team-scope.js';
import { PrismaService } from '../database/index.js';
import { BadUserInputError, NotFoundError } from '../errors/domain-errors.js';
import { pageRequest, toConnection, type ConnectionShape } from '../graphql/connection.js';
import { sizeOf } from '../graphql/size.model.js';
import type { BatchLoad, RequestLoaders } from '../graphql/request-loaders.js';
import { checkId } from '../validation/input.js';
import type { ShardRecord } from './shard-record.js';
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
    const teamFilter = typeof args.teamId === 'string' ? checkId('teamId', args.teamId) : undefined;
    if (caller.role !== Role.ADMIN && teamFilter !== undefined && teamFilter !== caller.teamId) {
      return toConnection<ShardRecord>(page, [], shardKeyOf);
    }
    const teamId = caller.role === Role.ADMIN ? teamFilter : caller.teamId;
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

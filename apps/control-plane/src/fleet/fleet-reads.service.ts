import { Injectable } from '@nestjs/common';
import { PrismaService } from '../database/index.js';
import { BadUserInputError, NotFoundError } from '../errors/domain-errors.js';
import { pageRequest, toConnection, type ConnectionShape } from '../graphql/connection.js';
import type { BatchLoad, RequestLoaders } from '../graphql/request-loaders.js';
import {
  gpuView,
  hostView,
  type Gpu,
  type GpusArgs,
  type Host,
  type HostsArgs,
} from './fleet.model.js';

const HOST_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** Hosts and GPUs as the API shows them (every token may see them; shards stay team-scoped). */
@Injectable()
export class FleetReadsService {
  constructor(private readonly prisma: PrismaService) {}

  /** NOT_FOUND for a host that does not exist or was removed. */
  async get(id: string): Promise<Host> {
    const hostId = checkHostId('id', id);
    const host = await this.prisma.host.findUnique({
      where: { id: hostId },
      include: { gpus: true },
    });
    if (host === null || host.removedAt !== null) throw new NotFoundError('host', id);
    return hostView(host);
  }

  /** The host as removeHost left it. */
  async getIncludingRemoved(hostId: string): Promise<Host> {
    const host = await this.prisma.host.findUniqueOrThrow({
      where: { id: hostId },
      include: { gpus: true },
    });
    return hostView(host);
  }

  /** By id, batched with the request's other host loads (Shard.host of a page); null if gone. */
  getLoaded(loaders: RequestLoaders, id: string): Promise<Host | null> {
    return loaders.load(this.hostsById, id);
  }

  private readonly hostsById: BatchLoad<string, Host | null> = {
    loadMany: async (ids) => {
      const rows = await this.prisma.host.findMany({
        where: { id: { in: [...ids] } },
        include: { gpus: true },
      });
      return new Map(rows.map((host) => [host.id, hostView(host)]));
    },
    missing: () => null,
  };

  /** By id. */
  async list(args: HostsArgs): Promise<ConnectionShape<Host>> {
    const page = pageRequest(args);
    const rows = await this.prisma.host.findMany({
      where: {
        removedAt: null,
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
    const page = pageRequest(args);
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

export function checkHostId(field: string, value: string): string {
  if (!HOST_ID.test(value)) {
    throw BadUserInputError.of(field, 'is not a host id (1 to 64 of A-Z a-z 0-9 _ -)');
  }
  return value;
}

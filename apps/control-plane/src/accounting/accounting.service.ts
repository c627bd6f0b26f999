import { Injectable } from '@nestjs/common';
import {
  account,
  bytes,
  shardId,
  shardIntervalsOf,
  shardSamplesOf,
  teamId as limitsTeamId,
  type GpuReservation,
  type GpuUsageSample,
  suspendedGibHours,
  type SuspensionInterval,
  utcDaysOf,
} from '@gpushards/limits';
import type { Caller } from '../auth/caller.js';
import { PrismaService } from '../database/index.js';
import {
  pageRequest,
  toConnection,
  type ConnectionArgs,
  type ConnectionShape,
} from '../graphql/connection.js';
import { sizeOf } from '../graphql/size.model.js';
import { TeamsService } from '../teams/teams.service.js';
import type { ShardUsageReport, UsageDay, UsageReport } from './usage.model.js';
import { parseUsageWindow, type UsageWindow } from './usage-window.js';

/** One GPU's readings of one shard, as "epochMs usedBytes epochMs usedBytes ...". */
interface ReadingsRow {
  shardId: string;
  gpuUuid: string;
  readings: string;
}

/**
 * Usage over a window, computed on demand from the reservations (shard_gpu) and the raw usage
 * samples through libs/limits `account`. Nothing is precomputed, so a late, repeated or
 * out-of-order sample is simply part of the next answer (docs/metrics.md says why there are no
 * rollups).
 */
@Injectable()
export class AccountingService {
  constructor(
    private readonly prisma: PrismaService,
    private readonly teams: TeamsService,
  ) {}

  async usage(
    caller: Caller,
    teamIdArgument: string,
    from: string,
    to: string,
  ): Promise<UsageReport> {
    const window = parseUsageWindow(from, to);
    const team = await this.teams.get(caller, teamIdArgument, 'teamId');
    const reservations = await this.reservationsOverlapping(team.id, window);
    // Taken after reading the reservations, so none of them starts after it.
    const now = Date.now();
    const measuredUntil = Math.max(window.from.getTime(), Math.min(window.to.getTime(), now));
    const gpuReservations = reservations.map((r): GpuReservation => ({
      shardId: shardId(r.shardId),
      teamId: limitsTeamId(team.id),
      gpuUuid: r.gpuUuid,
      reservedBytes: bytes(Number(r.reservedBytes)),
      start: r.reservedAt.getTime(),
      end: r.releasedAt?.getTime() ?? Math.max(now, r.reservedAt.getTime()),
    }));
    const accountingWindow = { from: window.from.getTime(), to: window.to.getTime() };
    const inputs = {
      window: accountingWindow,
      intervals: shardIntervalsOf(gpuReservations),
      samples: shardSamplesOf(await this.samplesFor(reservations, window)),
      suspensions: await this.suspensionsOverlapping(team.id, window, now),
    };
    const report = account(inputs.intervals, inputs.samples, accountingWindow);
    const suspended = suspendedGibHours(inputs.suspensions, accountingWindow);
    // A shard suspended for the whole window held no GPU in it: listed for its suspended time.
    const suspendedOnly = [...suspended.keys()].filter(
      (id) => !report.shards.some((s) => s.shardId === id),
    );
    const accounts = [
      ...report.shards,
      ...suspendedOnly.map((id) => ({
        shardId: id,
        reservedGibHours: 0,
        usedGibHours: 0,
        peakUsedBytes: 0,
      })),
    ].sort((a, b) => (a.shardId < b.shardId ? -1 : a.shardId > b.shardId ? 1 : 0));
    const shards = await this.prisma.shard.findMany({
      where: { id: { in: accounts.map((s) => s.shardId) } },
      select: { id: true, name: true, hostId: true },
    });
    const shardById = new Map(shards.map((s) => [s.id, s]));
    const teamAccount = report.teams[0];
    return {
      team,
      from: window.from,
      to: window.to,
      measuredUntil: new Date(measuredUntil),
      reservedGibHours: teamAccount?.reservedGibHours ?? 0,
      usedGibHours: teamAccount?.usedGibHours ?? 0,
      suspendedGibHours: [...suspended.values()].reduce((sum, hours) => sum + hours, 0),
      peakUsed: sizeOf(teamAccount?.peakUsedBytes ?? 0),
      shardCount: teamAccount?.shardCount ?? 0,
      shardReports: accounts.map((s) => ({
        shardId: s.shardId,
        shardName: shardById.get(s.shardId)?.name ?? '',
        hostId: shardById.get(s.shardId)?.hostId ?? null,
        reservedGibHours: s.reservedGibHours,
        usedGibHours: s.usedGibHours,
        suspendedGibHours: suspended.get(s.shardId) ?? 0,
        peakUsed: sizeOf(s.peakUsedBytes),
      })),
      inputs,
    };
  }

  /**
   * The report per UTC day of its window, from the inputs it was computed from: a chart of a
   * month is one request and one read, not one per day.
   */
  days(report: UsageReport): UsageDay[] {
    const { intervals, samples, suspensions } = report.inputs;
    return utcDaysOf(report.inputs.window).map(({ day, window }) => {
      const team = account(intervals, samples, window).teams[0];
      const suspended = suspendedGibHours(suspensions, window);
      return {
        day,
        reservedGibHours: team?.reservedGibHours ?? 0,
        usedGibHours: team?.usedGibHours ?? 0,
        suspendedGibHours: [...suspended.values()].reduce((sum, hours) => sum + hours, 0),
        peakUsed: sizeOf(team?.peakUsedBytes ?? 0),
      };
    });
  }

  /** A page of the report's shards, keyed by shard id (the order `account` returns them in). */
  shardPage(report: UsageReport, args: ConnectionArgs): ConnectionShape<ShardUsageReport> {
    const page = pageRequest(args);
    const after = page.afterKey;
    const rows = report.shardReports
      .filter((s) => after === undefined || s.shardId > after)
      .slice(0, page.take);
    return toConnection(page, rows, (s) => s.shardId);
  }

  /** The team's stays in host RAM that overlap the window (elastic shards). */
  private async suspensionsOverlapping(
    teamId: string,
    window: UsageWindow,
    now: number,
  ): Promise<SuspensionInterval[]> {
    const rows = await this.prisma.shardSuspension.findMany({
      where: {
        teamId,
        suspendedAt: { lt: window.to },
        OR: [{ resumedAt: null }, { resumedAt: { gt: window.from } }],
      },
    });
    return rows.map((row) => ({
      shardId: shardId(row.shardId),
      bytes: bytes(Number(row.bytes)),
      start: row.suspendedAt.getTime(),
      end: row.resumedAt?.getTime() ?? Math.max(now, row.suspendedAt.getTime()),
    }));
  }

  private reservationsOverlapping(teamId: string, window: UsageWindow) {
    return this.prisma.shardGpu.findMany({
      where: {
        shard: { teamId },
        reservedAt: { lt: window.to },
        OR: [{ releasedAt: null }, { releasedAt: { gt: window.from } }],
      },
      select: {
        shardId: true,
        gpuUuid: true,
        reservedBytes: true,
        reservedAt: true,
        releasedAt: true,
      },
    });
  }

  /**
   * The samples `account` needs for these reservations: each GPU's last sample before the
   * window (its value holds into the window) and, inside the window, only the samples that
   * change the GPU's value. Dropping a sample equal to the one before it leaves the step
   * function exactly as it was, and GPU memory in use mostly stays flat, so few rows remain.
   * They come back as one text per GPU ("ms bytes ms bytes ..."): a row object per sample
   * costs the driver several times more than the whole computation.
   */
  private async samplesFor(
    reservations: readonly { shardId: string; gpuUuid: string }[],
    window: UsageWindow,
  ): Promise<GpuUsageSample[]> {
    // A shard holds a GPU over several intervals when it was resized or came back.
    const pairs = new Map(reservations.map((r) => [`${r.shardId} ${r.gpuUuid}`, r]));
    if (pairs.size === 0) return [];
    const shardIds = [...pairs.values()].map((r) => r.shardId);
    const gpuUuids = [...pairs.values()].map((r) => r.gpuUuid);
    const rows = await this.prisma.$queryRaw<ReadingsRow[]>`
      WITH held (shard_id, gpu_uuid) AS (
             SELECT * FROM unnest(${shardIds}::uuid[], ${gpuUuids}::text[])),
           readings AS (
             SELECT shard_id, gpu_uuid, at, used_bytes
               FROM (SELECT sample.*,
                            lag(used_bytes) OVER (PARTITION BY shard_id, gpu_uuid ORDER BY at)
                              AS previous
                       FROM usage_sample sample JOIN held USING (shard_id, gpu_uuid)
                      WHERE sample.at >= ${window.from}::timestamptz
                        AND sample.at < ${window.to}::timestamptz) inside
              WHERE previous IS DISTINCT FROM used_bytes
             UNION ALL
             SELECT before.*
               FROM held CROSS JOIN LATERAL (
                      SELECT shard_id, gpu_uuid, at, used_bytes
                        FROM usage_sample sample
                       WHERE sample.shard_id = held.shard_id
                         AND sample.gpu_uuid = held.gpu_uuid
                         AND sample.at < ${window.from}::timestamptz
                       ORDER BY sample.at DESC
                       LIMIT 1) before)
      SELECT shard_id::text AS "shardId", gpu_uuid AS "gpuUuid",
             string_agg((extract(epoch FROM at) * 1000)::bigint || ' ' || used_bytes, ' ')
               AS readings
        FROM readings
       GROUP BY shard_id, gpu_uuid`;
    const samples: GpuUsageSample[] = [];
    for (const row of rows) {
      const id = shardId(row.shardId);
      const fields = row.readings.split(' ');
      for (let i = 0; i + 1 < fields.length; i += 2) {
        samples.push({
          shardId: id,
          gpuUuid: row.gpuUuid,
          at: Number(fields[i]),
          usedBytes: bytes(Number(fields[i + 1])),
        });
      }
    }
    return samples;
  }
}

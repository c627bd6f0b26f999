import { Inject, Injectable } from '@nestjs/common';
import { Gauge, Registry } from 'prom-client';
import { PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { LIVE_SHARD_STATES } from '../teams/teams.service.js';

const HOST_STATES = ['ONLINE', 'OFFLINE', 'CORDONED', 'DRAINING'] as const;

/** What one scrape reports, read from the database in one snapshot (REPEATABLE READ). */
export interface FleetSnapshot {
  readonly hosts: readonly { state: string; count: number }[];
  readonly gpus: readonly {
    host: string;
    gpu: string;
    model: string;
    totalBytes: bigint;
    reservedBytes: bigint;
    usedBytes: bigint;
    unattributedBytes: bigint;
  }[];
  readonly shards: readonly {
    shard: string;
    team: string;
    host: string | null;
    limitBytes: bigint;
    usedBytes: bigint;
    realBytes: bigint | null;
  }[];
  /** Each live shard's GPU activity per GPU, where its host reports it (compute ledger). */
  readonly activity: readonly {
    shard: string;
    team: string;
    host: string | null;
    gpu: string;
    busyRatio: number | null;
    lastKernelSeconds: number | null;
  }[];
  readonly teams: readonly {
    team: string;
    quotaBytes: bigint | null;
    reservedBytes: bigint;
    shards: number;
  }[];
}

const EMPTY_SNAPSHOT: FleetSnapshot = { hosts: [], gpus: [], shards: [], activity: [], teams: [] };

type Labels<Names extends string> = Partial<Record<Names, string>>;

/**
 * The fleet's gauges, read from the database when Prometheus scrapes (prom-client `collect`),
 * so they are right on every replica and after restarts, and no code that changes the fleet
 * has to remember to update them. Every gauge of one scrape shares one snapshot: a handful of
 * queries whose size is the fleet's (GPUs, live shards, teams), never the history's.
 */
@Injectable()
export class FleetMetrics {
  private readonly logger: Logger;
  private inFlight: Promise<FleetSnapshot> | null = null;

  constructor(
    registry: Registry,
    private readonly prisma: PrismaService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'metrics' });
    let databaseUp = 0;
    const gauge = <Names extends string>(
      name: string,
      help: string,
      labelNames: readonly Names[],
      values: (snapshot: FleetSnapshot) => Iterable<[Labels<Names>, number | bigint]>,
    ) =>
      new Gauge<Names>({
        name,
        help,
        labelNames,
        registers: [registry],
        collect: async function (this: Gauge<Names>) {
          const snapshot = await snapshotOf();
          this.reset();
          for (const [labels, value] of values(snapshot)) this.set(labels, Number(value));
        },
      });
    const snapshotOf = async () => {
      try {
        const snapshot = await this.snapshot();
        databaseUp = 1;
        return snapshot;
      } catch (error) {
        databaseUp = 0;
        this.logger.error({ err: error }, 'metrics could not read the database');
        return EMPTY_SNAPSHOT;
      }
    };

    gauge(
      'gpushards_metrics_database_up',
      '1 when this scrape read the fleet from the database, 0 when that failed (the gpushards_* fleet series are then missing).',
      [],
      function* () {
        yield [{}, databaseUp];
      },
    );
    gauge(
      'gpushards_hosts',
      'Hosts known to the control plane, by state (ONLINE, OFFLINE, CORDONED, DRAINING).',
      ['state'],
      function* ({ hosts }) {
        if (hosts.length === 0 && databaseUp === 0) return;
        for (const state of HOST_STATES) {
          yield [{ state }, hosts.find((h) => h.state === state)?.count ?? 0];
        }
      },
    );
    const gpuLabels = ['host', 'gpu', 'model'] as const;
    gauge(
      'gpushards_gpu_total_bytes',
      'Physical memory of the GPU.',
      gpuLabels,
      function* ({ gpus }) {
        for (const g of gpus) yield [{ host: g.host, gpu: g.gpu, model: g.model }, g.totalBytes];
      },
    );
    gauge(
      'gpushards_gpu_reserved_bytes',
      "Memory reserved on the GPU by live shards (their caps: requested bytes plus the host's context overhead).",
      gpuLabels,
      function* ({ gpus }) {
        for (const g of gpus) yield [{ host: g.host, gpu: g.gpu, model: g.model }, g.reservedBytes];
      },
    );
    gauge(
      'gpushards_gpu_used_bytes',
      "Memory in use on the whole GPU at the host's last heartbeat (all processes, not only shards).",
      gpuLabels,
      function* ({ gpus }) {
        for (const g of gpus) yield [{ host: g.host, gpu: g.gpu, model: g.model }, g.usedBytes];
      },
    );
    gauge(
      'gpushards_gpu_unattributed_bytes',
      "Memory held on the GPU at the host's last heartbeat by processes of no shard and not on the host's allow-list (NVML per process).",
      gpuLabels,
      function* ({ gpus }) {
        for (const g of gpus)
          yield [{ host: g.host, gpu: g.gpu, model: g.model }, g.unattributedBytes];
      },
    );
    const shardLabels = ['shard', 'team', 'host'] as const;
    gauge(
      'gpushards_shard_limit_bytes',
      "A live shard's memory cap summed over its GPUs (what it reserves; context overhead included).",
      shardLabels,
      function* ({ shards }) {
        for (const s of shards)
          yield [{ shard: s.shard, team: s.team, host: s.host ?? '' }, s.limitBytes];
      },
    );
    gauge(
      'gpushards_shard_used_bytes',
      "A live shard's memory in use summed over its GPUs, at its host's last heartbeat.",
      shardLabels,
      function* ({ shards }) {
        for (const s of shards)
          yield [{ shard: s.shard, team: s.team, host: s.host ?? '' }, s.usedBytes];
      },
    );
    gauge(
      'gpushards_shard_real_bytes',
      "What a live shard's processes really held, summed over its GPUs, at its host's last heartbeat (NVML per process, measured by the agent outside the container); no series until the agent reports it.",
      shardLabels,
      function* ({ shards }) {
        for (const s of shards)
          if (s.realBytes !== null)
            yield [{ shard: s.shard, team: s.team, host: s.host ?? '' }, s.realBytes];
      },
    );
    const activityLabels = ['shard', 'team', 'host', 'gpu'] as const;
    gauge(
      'gpushards_shard_gpu_busy_ratio',
      "The share of time a live shard held a GPU between its host's last two heartbeats (compute ledger, docs/compute.md); no series until the agent reports it.",
      activityLabels,
      function* ({ activity }) {
        for (const a of activity)
          if (a.busyRatio !== null)
            yield [{ shard: a.shard, team: a.team, host: a.host ?? '', gpu: a.gpu }, a.busyRatio];
      },
    );
    gauge(
      'gpushards_shard_last_kernel_seconds',
      "Seconds since a live shard last launched a kernel on a GPU (compute ledger, as of its host's last heartbeat); no series until it has launched one.",
      activityLabels,
      function* ({ activity }) {
        for (const a of activity)
          if (a.lastKernelSeconds !== null)
            yield [
              { shard: a.shard, team: a.team, host: a.host ?? '', gpu: a.gpu },
              a.lastKernelSeconds,
            ];
      },
    );
    gauge(
      'gpushards_team_quota_bytes',
      "The team's quota of memory (maxTotal); teams without a quota policy have no series.",
      ['team'],
      function* ({ teams }) {
        for (const t of teams) if (t.quotaBytes !== null) yield [{ team: t.team }, t.quotaBytes];
      },
    );
    gauge(
      'gpushards_team_reserved_bytes',
      "Memory the team's live shards requested (per GPU × GPUs, no overhead): what counts against the quota.",
      ['team'],
      function* ({ teams }) {
        for (const t of teams) yield [{ team: t.team }, t.reservedBytes];
      },
    );
    gauge(
      'gpushards_team_shards',
      "The team's live shards (those that count against its quota).",
      ['team'],
      function* ({ teams }) {
        for (const t of teams) yield [{ team: t.team }, t.shards];
      },
    );
  }

  /** One read per scrape: the gauges of a scrape collect at once and share it. */
  snapshot(): Promise<FleetSnapshot> {
    this.inFlight ??= this.read().finally(() => {
      this.inFlight = null;
    });
    return this.inFlight;
  }

  private async read(): Promise<FleetSnapshot> {
    const [hosts, gpus, shards, activity, teams] = await this.prisma.$transaction(
      [
        this.prisma.$queryRaw<FleetSnapshot['hosts'][number][]>`
        SELECT state::text AS state, count(*)::int AS count FROM host GROUP BY state`,
        this.prisma.$queryRaw<FleetSnapshot['gpus'][number][]>`
        SELECT host_id AS host, uuid AS gpu, model, total_bytes AS "totalBytes",
               reserved_bytes AS "reservedBytes", used_bytes AS "usedBytes",
               unattributed_bytes AS "unattributedBytes"
          FROM gpu`,
        this.prisma.$queryRaw<FleetSnapshot['shards'][number][]>`
        SELECT shard.id::text AS shard, team.name AS team, shard.host_id AS host,
               sum(held.reserved_bytes)::bigint AS "limitBytes",
               sum(held.used_bytes)::bigint AS "usedBytes",
               sum(held.real_bytes)::bigint AS "realBytes"
          FROM shard_gpu held
          JOIN shard ON shard.id = held.shard_id
          JOIN team ON team.id = shard.team_id
         WHERE held.released_at IS NULL
         GROUP BY shard.id, team.name, shard.host_id`,
        this.prisma.$queryRaw<FleetSnapshot['activity'][number][]>`
        SELECT shard.id::text AS shard, team.name AS team, shard.host_id AS host,
               held.gpu_uuid AS gpu, held.busy_ratio AS "busyRatio",
               CASE WHEN held.last_kernel_at IS NULL THEN NULL
                    ELSE greatest(0, extract(epoch FROM (now() - held.last_kernel_at)))::float8
               END AS "lastKernelSeconds"
          FROM shard_gpu held
          JOIN shard ON shard.id = held.shard_id
          JOIN team ON team.id = shard.team_id
         WHERE held.released_at IS NULL
           AND (held.busy_ratio IS NOT NULL OR held.last_kernel_at IS NOT NULL)`,
        this.prisma.$queryRaw<FleetSnapshot['teams'][number][]>`
        SELECT team.name AS team, quota.max_total_bytes AS "quotaBytes",
               coalesce(live.reserved, 0)::bigint AS "reservedBytes",
               coalesce(live.shards, 0)::int AS shards
          FROM team
          LEFT JOIN quota_policy quota ON quota.team_id = team.id
          LEFT JOIN (SELECT team_id, sum(bytes_per_gpu * gpu_count) AS reserved, count(*) AS shards
                       FROM shard
                      WHERE state::text = ANY(${[...LIVE_SHARD_STATES]})
                      GROUP BY team_id) live ON live.team_id = team.id`,
      ],
      { isolationLevel: 'RepeatableRead' },
    );
    return { hosts, gpus, shards, activity, teams };
  }
}

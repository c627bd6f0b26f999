/**
 * What an admission pass reads: the pending shards, the shards that hold capacity and the
 * teams (guarantees, limits, decayed usage), in libs/limits queue terms.
 */
import {
  bytes,
  DEFAULT_PRIORITY_CLASS,
  effectiveGpuModelFilter,
  gpuUuid,
  hostId,
  type HeldShard,
  type Host,
  type PendingShard,
  type PriorityClasses,
  type QueueTeam,
  type SuspendedShard,
  MIN_IDLE_SECONDS,
} from '@gpushards/limits';
import { Prisma, type RawSql } from '../database/index.js';
import { SUSPEND_RETRY_SECONDS } from '../elastic/suspend-retry.js';
import { stringRecord } from '../shards/shard-record.js';

type Reader = Pick<RawSql, '$queryRaw'>;

/** One pending shard as readPending's aggregate carries it (a JSON array, see the query). */
type PendingRow = [
  id: string,
  teamId: string,
  bytesPerGpu: number,
  gpuCount: number,
  gpuModelInclude: string[],
  gpuModelExclude: string[],
  hostSelector: Prisma.JsonValue,
  placementPolicy: string,
  priorityClass: string,
  arrivedAtMs: number,
  expiresAtMs: number | null,
  computeSharePermille: number,
  reclaimedFor: string | null,
  computeMode: string,
];

/**
 * The PENDING shards, all of them or those of `ids`. Aggregated to one JSON value (parsing one
 * string costs a fraction of decoding 10,000 rows of 14 columns); the teams' allowed models
 * are read apart, once. Without `reclaimInFlight`: see readReclaimsInFlight.
 */
export async function readPending(
  reader: Reader,
  classes: PriorityClasses,
  ids?: readonly string[],
): Promise<PendingShard[]> {
  const [aggregate] = await reader.$queryRaw<{ rows: PendingRow[] | null }[]>`
    SELECT json_agg(json_build_array(
             id, team_id, bytes_per_gpu, gpu_count, gpu_model_include, gpu_model_exclude,
             host_selector, placement_policy, priority_class,
             floor(extract(epoch FROM coalesce(queued_at, created_at)) * 1000)::float8,
             floor(extract(epoch FROM expires_at) * 1000)::float8, compute_share_permille,
             reclaim_for, compute_mode)) AS rows
      FROM shard
     WHERE state = 'PENDING' ${
       ids === undefined ? Prisma.empty : Prisma.sql`AND id = ANY(${[...ids]}::uuid[])`
     }`;
  const rows = aggregate?.rows ?? [];
  if (rows.length === 0) return [];
  const allowedByTeam = new Map(
    (
      await reader.$queryRaw<{ teamId: string; allowed: string[] }[]>`
        SELECT team_id::text AS "teamId", allowed_gpu_models AS allowed FROM quota_policy
         WHERE cardinality(allowed_gpu_models) > 0`
    ).map((row) => [row.teamId, row.allowed]),
  );
  return rows.map(
    ([
      id,
      teamId,
      bytesPerGpu,
      gpuCount,
      gpuModelInclude,
      gpuModelExclude,
      hostSelector,
      placementPolicy,
      priorityClass,
      arrivedAtMs,
      expiresAtMs,
      computeSharePermille,
      reclaimedFor,
      computeMode,
    ]) => {
      const cls = classes.get(priorityClass) ?? classes.require(DEFAULT_PRIORITY_CLASS);
      const requested = { include: gpuModelInclude, exclude: gpuModelExclude };
      const allowed = allowedByTeam.get(teamId);
      const effective =
        allowed === undefined
          ? undefined
          : effectiveGpuModelFilter(requested, { allowedGpuModels: allowed });
      return {
        id,
        teamId,
        request: {
          bytesPerGpu: bytes(bytesPerGpu),
          gpuCount,
          gpuModel: effective?.ok ? effective.filter : requested,
          hostSelector: stringRecord(hostSelector),
          policy: placementPolicy === 'SPREAD' ? 'spread' : 'binpack',
          ...(computeSharePermille > 0 ? { computeSharePermille } : {}),
          ...(computeMode === 'ISOLATED' ? { computeMode: 'ISOLATED' as const } : {}),
        },
        priorityRank: cls.rank,
        preemptible: cls.preemptible,
        arrivedAt: arrivedAtMs,
        ...(expiresAtMs === null ? {} : { expiresAt: expiresAtMs }),
        ...(reclaimedFor === null ? {} : { reclaimedFor }),
      };
    },
  );
}

/** The pending shards with their reclaims in flight marked. */
export function withReclaimsInFlight(
  pending: readonly PendingShard[],
  inFlight: ReadonlyMap<string, unknown>,
): readonly PendingShard[] {
  if (inFlight.size === 0) return pending;
  return pending.map((shard) =>
    inFlight.has(shard.id) ? { ...shard, reclaimInFlight: true } : shard,
  );
}

interface HeldRow {
  id: string;
  teamId: string;
  hostId: string;
  state: string;
  quotaBytes: bigint;
  priorityClass: string;
  placedAt: Date;
  reclaimFor: string | null;
  gpuUuids: string[];
  perGpu: bigint;
  model: string;
  elastic: boolean;
  idleSince: Date | null;
}

/**
 * How long an elastic shard must have launched no kernel before the queue may suspend it to
 * make room (docs/elastic.md), unless its team's idle policy reported it idle sooner: the
 * shortest idle time a policy may set (a minute's pause is a data loader, not an idle shard).
 */
export const MAKE_ROOM_IDLE_SECONDS = MIN_IDLE_SECONDS;

export async function readHeld(reader: Reader, classes: PriorityClasses): Promise<HeldShard[]> {
  const rows = await reader.$queryRaw<HeldRow[]>`
    SELECT shard.id::text AS id, shard.team_id::text AS "teamId", shard.host_id AS "hostId",
           shard.state::text AS state, shard.bytes_per_gpu * shard.gpu_count AS "quotaBytes",
           shard.priority_class AS "priorityClass",
           -- Not yet running: placed about when it last changed state (a requeued shard placed
           -- again is young, whenever it was created).
           coalesce(shard.started_at, shard.updated_at) AS "placedAt",
           shard.reclaim_for::text AS "reclaimFor",
           array_agg(held.gpu_uuid ORDER BY held.gpu_uuid) AS "gpuUuids",
           max(held.reserved_bytes) AS "perGpu", min(gpu.model) AS model,
           -- Not elastic for SUSPEND_RETRY_SECONDS after a suspend that failed (suspend-retry.ts).
           shard.elastic AND coalesce(bool_and(quota.allow_elastic), false)
             AND NOT (shard.memory_move_error IS NOT NULL AND shard.state = 'RUNNING'
                      AND shard.last_event_at > now() - make_interval(secs => ${SUSPEND_RETRY_SECONDS}))
             AS elastic,
           -- Idle (make-room may suspend it): no kernel on any GPU for MAKE_ROOM_IDLE_SECONDS
           -- on a host that reports compute activity, counted from its last kernel (its start
           -- if none) or its last resume, whichever is later (a shard resumed because a process asked for
           -- the GPU is never taken again before that process goes on: measured on an H200, the
           -- queue otherwise suspended it again at once). Running shards only; null: busy or
           -- unknown.
           CASE WHEN shard.state <> 'RUNNING' THEN NULL
                WHEN bool_or(held.busy_ratio IS NOT NULL OR held.last_kernel_at IS NOT NULL)
                     AND greatest(coalesce(max(held.last_kernel_at), shard.started_at),
                                  shard.resume_wanted_at)
                         <= now() - make_interval(secs => ${MAKE_ROOM_IDLE_SECONDS})
                  THEN greatest(coalesce(max(held.last_kernel_at), shard.started_at),
                                shard.resume_wanted_at) END AS "idleSince"
      FROM shard
      JOIN shard_gpu held ON held.shard_id = shard.id AND held.released_at IS NULL
      JOIN gpu ON gpu.uuid = held.gpu_uuid
      LEFT JOIN quota_policy quota ON quota.team_id = shard.team_id
     WHERE shard.state IN ('PLACED', 'STARTING', 'RUNNING', 'SUSPENDING', 'RESUMING', 'STOPPING')
       AND shard.host_id IS NOT NULL
     GROUP BY shard.id`;
  return rows.map((row) => {
    const cls = classes.get(row.priorityClass) ?? classes.require(DEFAULT_PRIORITY_CLASS);
    return {
      id: row.id,
      teamId: row.teamId,
      hostId: hostId(row.hostId),
      gpuUuids: row.gpuUuids.map(gpuUuid),
      reservedBytesPerGpu: bytes(Number(row.perGpu)),
      quotaBytes: bytes(Number(row.quotaBytes)),
      gpuModel: row.model,
      priorityRank: cls.rank,
      preemptible: cls.preemptible,
      placedAt: row.placedAt.getTime(),
      leaving: row.state === 'STOPPING' || row.state === 'SUSPENDING',
      ...((row.state === 'STOPPING' || row.state === 'SUSPENDING') && row.reclaimFor !== null
        ? { reclaimFor: row.reclaimFor }
        : {}),
      ...(row.elastic ? { elastic: true } : {}),
      ...(row.idleSince === null ? {} : { idleSince: row.idleSince.getTime() }),
      ...(row.state === 'SUSPENDING' ? { suspending: true } : {}),
    };
  });
}

/** What elastic memory adds to a pass (docs/elastic.md); absent when nothing is elastic. */
export interface ElasticInput {
  /** Hosts that suspend: their budget and what is taken of it (caps). */
  readonly hosts: ReadonlyMap<string, { budget: number; taken: number }>;
  /** Every SUSPENDED shard (their quota is still their teams'). */
  readonly suspended: readonly SuspendedShard[];
  /** The SUSPENDED shards whose resume is wanted, as the queue takes them. */
  readonly resumes: readonly PendingShard[];
}

interface SuspendedRow {
  id: string;
  teamId: string;
  hostId: string;
  gpuUuids: string[];
  perGpu: bigint;
  quotaBytes: bigint;
  bytesPerGpu: bigint;
  gpuCount: number;
  priorityClass: string;
  resumeWantedAt: Date | null;
}

/**
 * What a pass reads before it decides, besides the queue, in one statement: whether anything
 * is elastic (then readElastic follows), the reclaims in flight, the teams.
 */
export interface PassState {
  /** Some shard is elastic and running, or suspended or moving. */
  readonly elasticActive: boolean;
  /**
   * The shards that borrowed shards are stopping for (victims still STOPPING), each with when
   * its victims were told to stop (ms since the epoch): their updated_at, which the move to
   * STOPPING stamps and nothing writes again before their next state (the stuck-shard sweeper
   * reads it so too).
   */
  readonly victimStops: Map<string, number[]>;
  readonly teams: TeamRecord[];
}

/**
 * The SQL function admission_pass_state (migration 20261129133647_admission_pass_state), one
 * statement, prepared once per connection. With `lockKey`, the function takes the
 * admission lock first and reads in a snapshot taken after it, so a pass needs no round trip
 * of its own for the lock; it also has the rest of the pass's transaction planned generically
 * (the placements are a prepared statement, apply-placements.ts).
 */
export async function readPassState(
  reader: Reader,
  halfLifeMs: number,
  now: Date,
  lockKey?: number,
): Promise<PassState> {
  // Agents suspend by default (half their RAM): most fleets have budgets everywhere and no
  // elastic shard. Nothing can be suspended or resumed then, and the pass stays as cheap as
  // before elastic memory (no held shards read for make-room).
  const [row] = await reader.$queryRaw<
    {
      active: boolean;
      reclaims: Record<string, number[]> | null;
      teams: TeamRow[] | null;
    }[]
  >`/* prepared:admission_pass_state */
    SELECT elastic_active AS active, reclaims_json AS reclaims, teams_json AS teams
      FROM admission_pass_state(${lockKey ?? null}::bigint, ${halfLifeMs}::float8,
                                ${now}::timestamptz)`;
  return {
    elasticActive: row?.active === true,
    victimStops: new Map(Object.entries(row?.reclaims ?? {})),
    teams: (row?.teams ?? []).map(teamRecordOf),
  };
}

/**
 * The hosts that suspend and the SUSPENDED shards, each pinned to the GPUs of its latest
 * reservation; undefined when no host suspends (the pass is as before elastic memory). Read
 * when readPassState finds something elastic.
 */
export async function readElastic(
  reader: Reader,
  classes: PriorityClasses,
): Promise<ElasticInput | undefined> {
  const hostRows = await reader.$queryRaw<{ id: string; budget: number; taken: number }[]>`
    SELECT host.id, host.suspend_budget_bytes::float8 AS budget,
           coalesce(sum(shard.limit_bytes_per_gpu * shard.gpu_count), 0)::float8 AS taken
      FROM host
      LEFT JOIN shard ON shard.host_id = host.id
                     AND shard.state IN ('SUSPENDING', 'SUSPENDED', 'RESUMING')
     WHERE host.suspend_budget_bytes > 0 OR shard.id IS NOT NULL
     GROUP BY host.id`;
  if (hostRows.length === 0) return undefined;
  const rows = await reader.$queryRaw<SuspendedRow[]>`
    SELECT shard.id::text AS id, shard.team_id::text AS "teamId", shard.host_id AS "hostId",
           array_agg(last.gpu_uuid ORDER BY last.gpu_uuid) AS "gpuUuids",
           shard.limit_bytes_per_gpu AS "perGpu",
           shard.bytes_per_gpu * shard.gpu_count AS "quotaBytes",
           shard.bytes_per_gpu AS "bytesPerGpu", shard.gpu_count AS "gpuCount",
           shard.priority_class AS "priorityClass", shard.resume_wanted_at AS "resumeWantedAt"
      FROM shard
      JOIN shard_gpu last ON last.shard_id = shard.id
                         AND last.reserved_at = (SELECT max(reserved_at) FROM shard_gpu
                                                  WHERE shard_id = shard.id)
     WHERE shard.state = 'SUSPENDED' AND shard.host_id IS NOT NULL
     GROUP BY shard.id`;
  const suspended: SuspendedShard[] = rows.map((row) => ({
    id: row.id,
    teamId: row.teamId,
    hostId: hostId(row.hostId),
    gpuUuids: row.gpuUuids.map(gpuUuid),
    reservedBytesPerGpu: bytes(Number(row.perGpu)),
    quotaBytes: bytes(Number(row.quotaBytes)),
  }));
  const resumes: PendingShard[] = rows.flatMap((row, i) => {
    if (row.resumeWantedAt === null) return [];
    const cls = classes.get(row.priorityClass) ?? classes.require(DEFAULT_PRIORITY_CLASS);
    return [
      {
        id: row.id,
        teamId: row.teamId,
        request: {
          bytesPerGpu: bytes(Number(row.bytesPerGpu)),
          gpuCount: row.gpuCount,
          gpuModel: {},
          hostSelector: {},
          policy: 'binpack' as const,
        },
        priorityRank: cls.rank,
        preemptible: cls.preemptible,
        arrivedAt: row.resumeWantedAt.getTime(),
        resume: suspended[i]!,
      },
    ];
  });
  return {
    hosts: new Map(
      hostRows.map((row) => [row.id, { budget: row.budget, taken: row.taken }] as const),
    ),
    suspended,
    resumes,
  };
}

/** The fleet with each suspending host's budget and suspended caps (Host.suspend*). */
export function withSuspendRoom(fleet: readonly Host[], elastic: ElasticInput): Host[] {
  return fleet.map((host) => {
    const room = elastic.hosts.get(host.id);
    return room === undefined
      ? host
      : { ...host, suspendBudgetBytes: bytes(room.budget), suspendedBytes: bytes(room.taken) };
  });
}

/** A team as teamsQuery gives it: bigint columns as bigint, or as numbers inside JSON. */
interface TeamRow {
  id: string;
  name: string;
  hasPolicy: boolean;
  maxTotalBytes: bigint | number | null;
  maxShards: number | null;
  guaranteeBytes: bigint | number | null;
  guaranteeGpus: number | null;
  guaranteeGpuModel: string | null;
  decayed: number | null;
}

export interface TeamRecord extends QueueTeam {
  readonly name: string;
}

/**
 * Every team with its guarantee, limits and decayed GiB-hours: each hour's reserved
 * byte-seconds weighted 2^(−age/halfLife) from the end of its hour, over eight half-lives.
 */
export async function readTeams(
  reader: Reader,
  halfLifeMs: number,
  now: Date,
): Promise<TeamRecord[]> {
  // The SQL function queue_teams (migration 20261129133647_admission_pass_state), which every
  // pass reads through admission_pass_state.
  const rows = await reader.$queryRaw<TeamRow[]>`
    SELECT * FROM queue_teams(${halfLifeMs}::float8, ${now}::timestamptz)`;
  return rows.map(teamRecordOf);
}

function teamRecordOf(row: TeamRow): TeamRecord {
  return {
    id: row.id,
    name: row.name,
    guarantee: {
      bytes: bytes(Number(row.guaranteeBytes ?? 0)),
      ...(row.guaranteeGpus === null ? {} : { gpus: row.guaranteeGpus }),
      ...(row.guaranteeGpuModel === null ? {} : { gpuModel: row.guaranteeGpuModel }),
    },
    ...(row.hasPolicy
      ? { maxTotalBytes: bytes(Number(row.maxTotalBytes ?? 0)), maxShards: row.maxShards ?? 0 }
      : { maxTotalBytes: bytes(0), maxShards: 0 }),
    decayedGiBHours: Number(row.decayed ?? 0),
  };
}

/** Every GPU's reserved bytes as the reader sees them now. */
export async function readReservedBytes(reader: Reader): Promise<Map<string, number>> {
  const [row] = await reader.$queryRaw<{ reserved: Record<string, number> | null }[]>`
    SELECT json_object_agg(uuid, reserved_bytes) AS reserved FROM gpu`;
  return new Map(Object.entries(row?.reserved ?? {}));
}

/** The fleet with each GPU's reserved bytes replaced by `reserved` (GPUs it lacks unchanged). */
export function withReservedBytes(
  fleet: readonly Host[],
  reserved: ReadonlyMap<string, number>,
): Host[] {
  return fleet.map((host) => ({
    ...host,
    gpus: host.gpus.map((gpu) => {
      const now = reserved.get(gpu.uuid);
      return now === undefined ? gpu : { ...gpu, reservedBytes: bytes(now) };
    }),
  }));
}

/** How many of these shards (left the queue since a follower's last view) were placed. */
export async function countPlacedAmong(
  reader: Reader,
  shardIds: readonly string[],
): Promise<number> {
  // A placement sets the host; a shard deleted or expired while it waited never had one.
  const [row] = await reader.$queryRaw<{ n: number }[]>`
    SELECT count(*)::int AS n FROM shard
     WHERE id = ANY(${[...shardIds]}::uuid[]) AND host_id IS NOT NULL`;
  return row?.n ?? 0;
}

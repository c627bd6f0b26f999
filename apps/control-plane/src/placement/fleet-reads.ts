import type { HostState } from '@gpushards/limits';
import { Prisma, type RawSql } from '../database/index.js';

/**
 * The change feed's watermark of the statement that evaluates it: the oldest transaction id
 * still running when its snapshot was taken (xid8, as text). Every transaction below it had
 * ended, so the statement saw its rows; every one that had not ended is at or above it.
 */
const WATERMARK = Prisma.sql`pg_snapshot_xmin(pg_current_snapshot())::text`;

/** A client that can read: the service itself, or a transaction's client (PGlite: only that). */
export type DatabaseReader = Pick<RawSql, '$queryRaw'>;

export interface HostRow {
  id: string;
  name: string;
  state: HostState;
  labels: Prisma.JsonValue;
  contextOverheadBytes: bigint | number;
}

export interface GpuRow {
  uuid: string;
  hostId: string;
  index: number;
  model: string;
  totalBytes: bigint | number;
  reservedBytes: bigint | number;
  overcommitRatio: number;
  guaranteedComputePermille: number;
  /** The host's isolated (MPS) partition on it, and the ISOLATED shards' part of the guaranteed. */
  isolatedPoolPermille: number;
  isolatedComputePermille: number;
  /** Caps of its SUSPENDED shards, and memory held there by processes of no shard. */
  suspendedBytes: bigint | number;
  unattributedBytes: bigint | number;
}

/** Every host and every GPU not missing, for the fleet cache's whole read. */
export interface WholeFleet {
  readonly hosts: readonly HostRow[];
  readonly gpus: readonly GpuRow[];
  /** How many hosts there are, and the newest host.updated_at (text): what a later read compares. */
  readonly hostCount: number;
  readonly hostsChangedAt: string;
  /** The change-feed watermark of these rows (see readReservations); absent: unknown. */
  readonly watermark?: string;
}

export async function readWholeFleet(reader: DatabaseReader): Promise<WholeFleet> {
  // Aggregated to one JSON value per table: parsing one string is much cheaper than
  // decoding 8,000 rows, and the event loop is not held for long.
  const [hosts] = await reader.$queryRaw<
    {
      rows: [string, string, HostState, Prisma.JsonValue, number][] | null;
      count: number;
      changedAt: string | null;
      watermark?: string;
    }[]
  >`
    SELECT json_agg(json_build_array(id, name, state, labels, context_overhead_bytes)
                    ORDER BY id) AS rows,
           count(*)::int AS count, max(updated_at)::text AS "changedAt",
           ${WATERMARK} AS watermark
      FROM host`;
  const [gpus] = await reader.$queryRaw<
    {
      rows:
        | [
            string,
            string,
            number,
            string,
            number,
            number,
            number,
            number,
            number,
            number,
            number,
            number,
          ][]
        | null;
    }[]
  >`
    SELECT json_agg(json_build_array(uuid, host_id, index, model, total_bytes, reserved_bytes,
                                     overcommit_ratio, guaranteed_compute_permille,
                                     isolated_pool_permille, isolated_compute_permille,
                                     suspended_bytes, unattributed_bytes)) AS rows
      FROM gpu WHERE missing_since IS NULL`;
  return {
    hosts: (hosts?.rows ?? []).map((row) => ({
      id: row[0],
      name: row[1],
      state: row[2],
      labels: row[3],
      contextOverheadBytes: row[4],
    })),
    gpus: (gpus?.rows ?? []).map((row) => ({
      uuid: row[0],
      hostId: row[1],
      index: row[2],
      model: row[3],
      totalBytes: row[4],
      reservedBytes: row[5],
      overcommitRatio: row[6],
      guaranteedComputePermille: row[7],
      isolatedPoolPermille: row[8],
      isolatedComputePermille: row[9],
      suspendedBytes: row[10],
      unattributedBytes: row[11],
    })),
    hostCount: hosts?.count ?? 0,
    hostsChangedAt: hosts?.changedAt ?? '',
    // The host read's snapshot is the older of the two: what commits after it is at or above
    // its watermark, so the next periodic read fetches it, whichever of the two it concerns.
    ...(hosts?.watermark === undefined ? {} : { watermark: hosts.watermark }),
  };
}

/** What the periodic read brings: whether hosts changed, and the GPUs' reservations it read. */
export interface Reservations {
  readonly hostCount: number;
  /** The newest host.updated_at (the read of every GPU only). */
  readonly hostsChangedAt: string;
  /** Whether a host changed since the watermark (the read of the changes only). */
  readonly hostsChanged?: boolean;
  /** Reserved bytes by GPU UUID: every GPU read (not missing). */
  readonly reserved: Readonly<Record<string, number>>;
  /** Guaranteed compute permille by GPU UUID, for the GPUs read that have some. */
  readonly compute: Readonly<Record<string, number>>;
  /** Of that, the ISOLATED shards' permille, for the GPUs read that have some. */
  readonly isolated: Readonly<Record<string, number>>;
  /** Suspended caps by GPU UUID, for the GPUs read that have some; absent: none. */
  readonly suspended?: Readonly<Record<string, number>>;
  /** Memory of processes of no shard by GPU UUID, for the GPUs read that have some. */
  readonly unowned?: Readonly<Record<string, number>>;
  /** This read's watermark, the next read's `since`; absent: unknown. */
  readonly watermark?: string;
}

/**
 * The periodic read. With `since` (a watermark of an earlier read whose rows the cache holds),
 * only the GPUs that a transaction at or above it changed (gpu.reservations_changed_xid, set by
 * a trigger on every change of reserved bytes or compute shares), and those in `recheck`, and
 * whether a host changed (host.changed_xid, likewise); without, every GPU and the newest
 * host.updated_at. Either way the number of hosts (a deleted host stamps nothing).
 */
export async function readReservations(
  reader: DatabaseReader,
  since?: string,
  recheck: readonly string[] = [],
): Promise<Reservations> {
  const which =
    since === undefined
      ? Prisma.sql`missing_since IS NULL`
      : Prisma.sql`missing_since IS NULL
          AND (reservations_changed_xid >= ${since}::bigint OR uuid = ANY(${[...recheck]}::text[]))`;
  const hostNews =
    since === undefined
      ? Prisma.sql`(SELECT max(updated_at) FROM host)::text AS "changedAt", NULL AS "hostsChanged"`
      : Prisma.sql`NULL AS "changedAt",
          EXISTS (SELECT 1 FROM host WHERE changed_xid >= ${since}::bigint) AS "hostsChanged"`;
  const [row] = await reader.$queryRaw<
    {
      hosts: number;
      changedAt: string | null;
      hostsChanged?: boolean | null;
      watermark?: string;
      reserved: Record<string, number> | null;
      compute: Record<string, number> | null;
      isolated?: Record<string, number> | null;
      suspended?: Record<string, number> | null;
      unowned?: Record<string, number> | null;
    }[]
  >`
    WITH read AS (
      SELECT uuid, reserved_bytes, guaranteed_compute_permille, isolated_compute_permille,
             suspended_bytes, unattributed_bytes
        FROM gpu WHERE ${which})
    SELECT (SELECT count(*) FROM host)::int AS hosts, ${hostNews},
           ${WATERMARK} AS watermark,
           (SELECT json_object_agg(uuid, reserved_bytes) FROM read) AS reserved,
           (SELECT json_object_agg(uuid, guaranteed_compute_permille) FROM read
             WHERE guaranteed_compute_permille > 0) AS compute,
           (SELECT json_object_agg(uuid, isolated_compute_permille) FROM read
             WHERE isolated_compute_permille > 0) AS isolated,
           (SELECT json_object_agg(uuid, suspended_bytes) FROM read
             WHERE suspended_bytes > 0) AS suspended,
           (SELECT json_object_agg(uuid, unattributed_bytes) FROM read
             WHERE unattributed_bytes > 0) AS unowned`;
  return {
    hostCount: row?.hosts ?? 0,
    hostsChangedAt: row?.changedAt ?? '',
    ...(typeof row?.hostsChanged === 'boolean' ? { hostsChanged: row.hostsChanged } : {}),
    reserved: row?.reserved ?? {},
    compute: row?.compute ?? {},
    isolated: row?.isolated ?? {},
    suspended: row?.suspended ?? {},
    unowned: row?.unowned ?? {},
    ...(row?.watermark === undefined ? {} : { watermark: row.watermark }),
  };
}

/** These hosts and their GPUs (not missing), as rows. */
export async function readHosts(
  reader: DatabaseReader,
  ids: readonly string[],
): Promise<{ hosts: HostRow[]; gpus: GpuRow[] }> {
  const hosts = await reader.$queryRaw<HostRow[]>`
    SELECT id, name, state::text AS state, labels,
           context_overhead_bytes AS "contextOverheadBytes"
      FROM host WHERE id = ANY(${[...ids]}::text[])`;
  const gpus = await reader.$queryRaw<GpuRow[]>`
    SELECT uuid, host_id AS "hostId", index, model, total_bytes AS "totalBytes",
           reserved_bytes AS "reservedBytes", overcommit_ratio AS "overcommitRatio",
           guaranteed_compute_permille AS "guaranteedComputePermille",
           isolated_pool_permille AS "isolatedPoolPermille",
           isolated_compute_permille AS "isolatedComputePermille",
           suspended_bytes AS "suspendedBytes", unattributed_bytes AS "unattributedBytes"
      FROM gpu WHERE host_id = ANY(${[...ids]}::text[]) AND missing_since IS NULL`;
  return { hosts, gpus };
}

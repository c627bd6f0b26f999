-- Hand-written header: why this migration exists.
--
-- createShard's team read (team_quota_states) got slower with every shard created: 1.5 ms per
-- call at the start of a create-shard bench run, 15 ms after 40,000 creates (bench/README.md,
-- 2026-11-28 "createShard slowed down as shards piled up"). The fold deleted a team's
-- team_quota_usage rows and wrote one back, so every create left two dead rows behind, and the
-- team's rows were found through the index on team_id alone, whose entries point at every row
-- the team ever had until VACUUM removes them. The planner reads them with bitmap scans, which
-- never mark an index entry dead, so each read visited every dead version of its teams' rows
-- since the last VACUUM (1,199 index entries and about 800 heap pages per team to find two live
-- rows), and autovacuum visits a database at most once a minute.
--
-- Now each row carries its writer's transaction id (xid), the fold adds the rows it takes into
-- the team's team_quota_total row (updated in place, by lock holders only) and records below
-- which xid every row is folded, and a read looks only at the team's rows at or above that
-- mark, by the index (team_id, xid): the dead rows all lie below it and are never visited.

-- DropIndex
DROP INDEX "team_quota_usage_team_id_idx";

-- AlterTable: the rows already there get 0, at or above every team's mark (no team has a
-- team_quota_total row yet, which reads as a mark of 0), so they are counted until folded.
ALTER TABLE "team_quota_usage" ADD COLUMN     "xid" BIGINT NOT NULL DEFAULT 0;
ALTER TABLE "team_quota_usage" ALTER COLUMN "xid" DROP DEFAULT;

-- CreateTable
CREATE TABLE "team_quota_total" (
    "team_id" UUID NOT NULL,
    "shards" INTEGER NOT NULL,
    "bytes" BIGINT NOT NULL,
    "folded_below" BIGINT NOT NULL,

    CONSTRAINT "team_quota_total_pkey" PRIMARY KEY ("team_id")
);

-- CreateIndex
CREATE INDEX "team_quota_usage_team_id_xid_idx" ON "team_quota_usage"("team_id", "xid");

-- AddForeignKey
ALTER TABLE "team_quota_total" ADD CONSTRAINT "team_quota_total_team_id_fkey" FOREIGN KEY ("team_id") REFERENCES "team"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- Hand-written from here.

-- Every createShard batch updates its teams' rows: room on each page for the new versions keeps
-- those updates HOT (no new index entry; the page prunes the old versions itself).
ALTER TABLE "team_quota_total" SET (fillfactor = 50);

-- The trigger of migration 20261127044338_team_quota_usage, now stamping each row with the id of
-- the transaction that writes it (xid8, 64 bits: no wraparound; as the fleet change feed's
-- stamps, migration 20261127211721_fleet_change_feed).
CREATE OR REPLACE FUNCTION team_quota_usage_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') AND shard_counts_against_quota(OLD.state) THEN
    INSERT INTO team_quota_usage (team_id, shards, bytes, xid)
      VALUES (OLD.team_id, -1, -(OLD.bytes_per_gpu * OLD.gpu_count),
              pg_current_xact_id()::text::bigint);
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') AND shard_counts_against_quota(NEW.state) THEN
    INSERT INTO team_quota_usage (team_id, shards, bytes, xid)
      VALUES (NEW.team_id, 1, NEW.bytes_per_gpu * NEW.gpu_count,
              pg_current_xact_id()::text::bigint);
  END IF;
  RETURN NULL;
END $$;

-- team_quota_states of migration 20261127110500_team_quota_states (same arguments and columns;
-- the locks as there), reading and folding through the mark.
--
-- A team's usage: its team_quota_total row (none: 0 shards, 0 bytes, mark 0) plus its
-- team_quota_usage rows with xid at or above the row's folded_below. The fold (lock holders
-- only) takes the rows with xid from folded_below up to the statement's snapshot's xmin, the
-- oldest transaction still running when the snapshot was taken: every transaction below it had
-- ended, so the snapshot sees all of their rows (a rolled-back one's none), and no row below it
-- can appear later. It deletes them, adds them to the total and moves folded_below up to the
-- xmin. Rows of transactions at or above it (its own, ones still running, ones that committed
-- after an older one began) stay and are read until a later fold takes them. A sequence number
-- would not do as the mark: it orders inserts, not commits, and a row numbered below one
-- already folded could still commit. The price: a transaction left open anywhere in the
-- cluster holds the mark back, and the rows written meanwhile are read until it ends.
CREATE OR REPLACE FUNCTION team_quota_states(team_ids text[], covered_for text[], lock_space int4)
  RETURNS TABLE (
    "teamId" text, "hasPolicy" boolean, "maxTotalBytes" bigint, "maxShards" int,
    "maxBytesPerShard" bigint, "maxGpusPerShard" int, "allowedGpuModels" text[],
    "allowedImages" text[], "priority" int, "guaranteeBytes" bigint, "guaranteeGpuModel" text,
    "guaranteedModelBytes" bigint, "maxPriorityClass" text, "maxComputeSharePercent" int,
    "shardCount" int, "reservedBytes" bigint)
  LANGUAGE plpgsql VOLATILE
  -- Its statements are the same at every call, and planning them again each time (custom
  -- plans for the array parameters) cost more than running them.
  SET plan_cache_mode = force_generic_plan
  -- That plan is made once per connection, at its first call, and kept until the tables'
  -- statistics change: made while team_quota_usage was new and small, it read the table
  -- whole (a sequential scan reads the dead rows too), and went on doing so as the table grew.
  -- Every table here is read by an index on what the statement asks for.
  SET enable_seqscan = off
  AS $$
DECLARE
  key int4;
BEGIN
  IF lock_space IS NOT NULL THEN
    -- hashtext() may map two teams to one key; they then wait for each other, nothing worse.
    FOR key IN SELECT DISTINCT hashtext(id) FROM unnest(team_ids) AS id ORDER BY 1 LOOP
      PERFORM pg_advisory_xact_lock(lock_space, key);
    END LOOP;
  END IF;
  RETURN QUERY
    -- One statement, one snapshot: the fold's DELETE and UPDATE do not change what the SELECT
    -- reads (the total and the rows as they were when the statement began), which adds up to
    -- the same.
    WITH asked AS (
      SELECT team.id,
             coalesce(total.shards, 0) AS shards,
             coalesce(total.bytes, 0::bigint) AS bytes,
             coalesce(total.folded_below, 0::bigint) AS folded_below,
             greatest(coalesce(total.folded_below, 0::bigint),
                      pg_snapshot_xmin(pg_current_snapshot())::text::bigint) AS fold_below
        FROM team
        LEFT JOIN team_quota_total total ON total.team_id = team.id
       WHERE team.id = ANY(team_ids::uuid[])
    ), unfolded AS MATERIALIZED (
      -- Each team's rows not folded yet: the index's range from its mark up, never the rows
      -- folded (and deleted) before the mark. Found by the index once, then deleted by ctid
      -- (no one else deletes these rows: only lock holders fold).
      SELECT asked.id AS team_id, usage.ctid AS tid, usage.shards, usage.bytes,
             usage.xid < asked.fold_below AS to_fold
        FROM asked
        CROSS JOIN LATERAL (
          SELECT ctid, xid, shards, bytes FROM team_quota_usage
           WHERE team_quota_usage.team_id = asked.id
             AND team_quota_usage.xid >= asked.folded_below
        ) usage
    ), folded AS (
      DELETE FROM team_quota_usage
       WHERE lock_space IS NOT NULL
         AND ctid = ANY(ARRAY(SELECT tid FROM unfolded WHERE to_fold))
      RETURNING team_id, shards, bytes
    ), refolded AS (
      INSERT INTO team_quota_total AS total (team_id, shards, bytes, folded_below)
      SELECT asked.id, asked.shards + coalesce(sums.shards, 0),
             asked.bytes + coalesce(sums.bytes, 0::bigint), asked.fold_below
        FROM asked
        LEFT JOIN (
          SELECT team_id, sum(shards)::int AS shards, sum(bytes)::bigint AS bytes
            FROM folded GROUP BY team_id
        ) sums ON sums.team_id = asked.id
       WHERE lock_space IS NOT NULL
      ON CONFLICT (team_id) DO UPDATE
        SET shards = excluded.shards, bytes = excluded.bytes, folded_below = excluded.folded_below
        WHERE (total.shards, total.bytes, total.folded_below)
              IS DISTINCT FROM (excluded.shards, excluded.bytes, excluded.folded_below)
    )
    SELECT asked.id::text,
           quota.team_id IS NOT NULL,
           quota.max_total_bytes, quota.max_shards, quota.max_bytes_per_shard,
           quota.max_gpus_per_shard, quota.allowed_gpu_models, quota.allowed_images,
           quota.priority, quota.guarantee_bytes, quota.guarantee_gpu_model,
           covered.bytes,
           quota.max_priority_class, quota.max_compute_share_percent,
           (asked.shards + coalesce(held.shards, 0))::int,
           (asked.bytes + coalesce(held.bytes, 0::bigint))::bigint
      FROM asked
      LEFT JOIN quota_policy quota ON quota.team_id = asked.id
      LEFT JOIN (
        SELECT team_id, sum(shards)::int AS shards, sum(bytes)::bigint AS bytes
          FROM unfolded GROUP BY team_id
      ) held ON held.team_id = asked.id
      CROSS JOIN LATERAL (
        -- Requested bytes of the team's shards holding GPUs its guarantee covers (what a
        -- non-preemptible shard is checked against). CASE runs the sum only for the teams
        -- asked: it reads every live shard's GPUs.
        SELECT CASE WHEN asked.id = ANY(covered_for::uuid[]) THEN (
          SELECT coalesce(sum(shard.bytes_per_gpu * shard.gpu_count), 0)::bigint
            FROM shard
           WHERE shard.team_id = asked.id AND shard.state IN ('PLACED', 'STARTING', 'RUNNING')
             AND EXISTS (
               SELECT 1 FROM shard_gpu JOIN gpu ON gpu.uuid = shard_gpu.gpu_uuid
                WHERE shard_gpu.shard_id = shard.id AND shard_gpu.released_at IS NULL
                  AND strpos(lower(gpu.model),
                             lower(trim(coalesce(quota.guarantee_gpu_model, '')))) > 0)
        ) END AS bytes
      ) covered;
END $$;

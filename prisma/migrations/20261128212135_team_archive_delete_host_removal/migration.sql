-- AlterTable
ALTER TABLE "host" ADD COLUMN     "removed_at" TIMESTAMPTZ(3);

-- AlterTable
ALTER TABLE "team" ADD COLUMN     "archived_at" TIMESTAMPTZ(3),
ADD COLUMN     "deleted_at" TIMESTAMPTZ(3);

-- createShard and startShard refuse an archived (or deleted) team's shards in the transaction
-- that holds the team's lock, as archiveTeam and deleteTeam take it: team_quota_states says
-- so (a column added: the function is dropped and made again, otherwise as before).
DROP FUNCTION team_quota_states(text[], text[], int4);
CREATE OR REPLACE FUNCTION team_quota_states(team_ids text[], covered_for text[], lock_space int4)
  RETURNS TABLE (
    "teamId" text, "hasPolicy" boolean, "archived" boolean, "maxTotalBytes" bigint, "maxShards" int,
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
             team.archived_at IS NOT NULL OR team.deleted_at IS NOT NULL AS archived,
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
           asked.archived,
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

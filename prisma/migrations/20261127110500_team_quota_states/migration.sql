-- Hand-written: what createShard, resize and the compute share read of a team (its quota
-- policy and what its shards hold against it), as one function, so that createShard can take
-- its teams' locks, fold their usage rows and read them in one round trip. It held the locks
-- from the lock statement's answer to its commit; the round trip between the lock and the read
-- was the largest part of that hold that did no work (docs/database.md, "Team locks").
--
-- lock_space NULL: a plain read. Otherwise the transaction first takes
-- pg_advisory_xact_lock(lock_space, hashtext(id)) for each team (in key order, so two callers
-- locking overlapping sets queue instead of deadlocking) and folds each team's
-- team_quota_usage rows into one (only lock holders fold: two folds at once could each miss
-- the other's new row). A volatile PL/pgSQL function takes a new snapshot for each statement
-- under READ COMMITTED, so the read sees what the previous holders committed while it waited.
CREATE FUNCTION team_quota_states(team_ids text[], covered_for text[], lock_space int4)
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
    -- The fold rewrites the locked teams' rows as one row each; the SELECT still sums the rows
    -- as they were when the statement began, which add up to the same.
    WITH folded AS (
      DELETE FROM team_quota_usage
       WHERE lock_space IS NOT NULL AND team_id = ANY(team_ids::uuid[])
      RETURNING team_id, shards, bytes
    ), refolded AS (
      INSERT INTO team_quota_usage (team_id, shards, bytes)
      SELECT team_id, sum(shards)::int, sum(bytes)::bigint FROM folded GROUP BY team_id
    )
    SELECT team.id::text,
           quota.team_id IS NOT NULL,
           quota.max_total_bytes, quota.max_shards, quota.max_bytes_per_shard,
           quota.max_gpus_per_shard, quota.allowed_gpu_models, quota.allowed_images,
           quota.priority, quota.guarantee_bytes, quota.guarantee_gpu_model,
           covered.bytes,
           quota.max_priority_class, quota.max_compute_share_percent,
           held.shards, held.bytes
      FROM team
      LEFT JOIN quota_policy quota ON quota.team_id = team.id
      CROSS JOIN LATERAL (
        -- What its shards in the quota states request: the rows the shard trigger appends.
        SELECT coalesce(sum(usage.shards), 0)::int AS shards,
               coalesce(sum(usage.bytes), 0)::bigint AS bytes
          FROM team_quota_usage usage
         WHERE usage.team_id = team.id
      ) held
      CROSS JOIN LATERAL (
        -- Requested bytes of the team's shards holding GPUs its guarantee covers (what a
        -- non-preemptible shard is checked against). CASE runs the sum only for the teams
        -- asked: it reads every live shard's GPUs.
        SELECT CASE WHEN team.id = ANY(covered_for::uuid[]) THEN (
          SELECT coalesce(sum(shard.bytes_per_gpu * shard.gpu_count), 0)::bigint
            FROM shard
           WHERE shard.team_id = team.id AND shard.state IN ('PLACED', 'STARTING', 'RUNNING')
             AND EXISTS (
               SELECT 1 FROM shard_gpu JOIN gpu ON gpu.uuid = shard_gpu.gpu_uuid
                WHERE shard_gpu.shard_id = shard.id AND shard_gpu.released_at IS NULL
                  AND strpos(lower(gpu.model),
                             lower(trim(coalesce(quota.guarantee_gpu_model, '')))) > 0)
        ) END AS bytes
      ) covered
     WHERE team.id = ANY(team_ids::uuid[]);
END $$;

-- CreateIndex
CREATE INDEX "shard_elastic_active_idx" ON "shard"("state") WHERE (state = ANY (ARRAY['SUSPENDING'::shard_state, 'SUSPENDED'::shard_state, 'RESUMING'::shard_state])) OR ((state = 'RUNNING'::shard_state) AND elastic);

-- Hand-written: what every admission pass reads before it decides, in one round trip with the
-- admission lock (apps/control-plane/src/queue/queue-reads.ts, readPassState). The teams with
-- their guarantees, limits and decayed GiB-hours: each hour's reserved byte-seconds weighted
-- 2^(-age/halfLife) from the end of its hour, over eight half-lives (readTeams reads it too).
CREATE FUNCTION queue_teams(half_life_ms float8, pass_at timestamptz)
RETURNS TABLE (id text, name text, "hasPolicy" boolean, "maxTotalBytes" bigint,
               "maxShards" int, "guaranteeBytes" bigint, "guaranteeGpus" int,
               "guaranteeGpuModel" text, decayed float8)
LANGUAGE sql STABLE AS $$
  SELECT team.id::text, team.name, quota.team_id IS NOT NULL,
         quota.max_total_bytes, quota.max_shards,
         quota.guarantee_bytes, quota.guarantee_gpus, quota.guarantee_gpu_model,
         (SELECT sum(rollup.reserved_byte_seconds::float8 / (1073741824.0 * 3600)
                     * power(0.5, greatest(0, extract(epoch FROM
                         (pass_at - rollup.hour - interval '1 hour')) * 1000) / half_life_ms))
            FROM usage_rollup rollup
           WHERE rollup.team_id = team.id
             AND rollup.hour > pass_at - make_interval(secs => half_life_ms * 8 / 1000))
    FROM team LEFT JOIN quota_policy quota ON quota.team_id = team.id
$$;

-- With lock_key, takes the admission lock (pg_advisory_xact_lock) first and plans the rest of
-- the transaction's statements generically (plan_cache_mode: the pass's prepared statements
-- are planned once per connection, not at each pass). Then, in a snapshot of its own taken
-- after the lock (a VOLATILE function's statements each take one under READ COMMITTED; a
-- single plain statement would read as of before it waited): whether anything is elastic
-- (shard_elastic_active_idx), the reclaims in flight (each borrowed shard's victims' stop
-- times, ms), the teams.
CREATE FUNCTION admission_pass_state(lock_key bigint, half_life_ms float8, pass_at timestamptz)
RETURNS TABLE (elastic_active boolean, reclaims_json json, teams_json json)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF lock_key IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(lock_key);
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  END IF;
  RETURN QUERY
    SELECT EXISTS (SELECT 1 FROM shard
                    WHERE state IN ('SUSPENDING', 'SUSPENDED', 'RESUMING')
                       OR (state = 'RUNNING' AND elastic)),
           (SELECT json_object_agg(reclaim.id, reclaim.stops) FROM (
              SELECT shard.reclaim_for::text AS id,
                     array_agg(floor(extract(epoch FROM shard.updated_at) * 1000)::float8) AS stops
                FROM shard
               WHERE shard.reclaim_for IS NOT NULL AND shard.state = 'STOPPING'
               GROUP BY shard.reclaim_for) reclaim),
           (SELECT json_agg(team) FROM queue_teams(half_life_ms, pass_at) team);
END $$;

-- Hand-written: no change to schema.prisma.
--
-- The shard INSERT trigger of migration 20261127044338_team_quota_usage (stamped with the xid
-- since 20261128033955_team_quota_total) appended one team_quota_usage row per shard, so a
-- createShard batch of n shards ran the PL/pgSQL function n times and wrote n rows and 2n index
-- entries, which the next fold then deleted one by one. Now the INSERT trigger runs once per
-- statement and appends one row per team, what the statement's shards in the quota states add
-- up to (a batch's write is one statement). The rows still add up to the same usage, carry the
-- same xid and are folded the same way. The UPDATE and DELETE triggers stay per row: a
-- statement-level UPDATE trigger cannot name its columns, and would run for every UPDATE of
-- shard (heartbeats' and state events' too).
CREATE FUNCTION team_quota_usage_record_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO team_quota_usage (team_id, shards, bytes, xid)
    SELECT team_id, count(*)::int, sum(bytes_per_gpu * gpu_count)::bigint,
           pg_current_xact_id()::text::bigint
      FROM inserted_shards
     WHERE shard_counts_against_quota(state)
     GROUP BY team_id;
  RETURN NULL;
END $$;

DROP TRIGGER shard_quota_usage_insert ON shard;

CREATE TRIGGER shard_quota_usage_insert AFTER INSERT ON shard
  REFERENCING NEW TABLE AS inserted_shards
  FOR EACH STATEMENT EXECUTE FUNCTION team_quota_usage_record_inserted();

-- CreateTable
CREATE TABLE "team_quota_usage" (
    "id" BIGSERIAL NOT NULL,
    "team_id" UUID NOT NULL,
    "shards" INTEGER NOT NULL,
    "bytes" BIGINT NOT NULL,

    CONSTRAINT "team_quota_usage_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "team_quota_usage_team_id_idx" ON "team_quota_usage"("team_id");

-- AddForeignKey
ALTER TABLE "team_quota_usage" ADD CONSTRAINT "team_quota_usage_team_id_fkey" FOREIGN KEY ("team_id") REFERENCES "team"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- Hand-written: the quota states (libs/limits countsAgainstQuota; a test compares the two for
-- every state) and the trigger that keeps team_quota_usage adding up to what the team's shards
-- in those states request. Each change appends a row, so the trigger never waits on another
-- transaction's row: state changes of many teams' shards take no lock on a shared counter.
CREATE FUNCTION shard_counts_against_quota(state shard_state) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT state IN ('PENDING', 'PLACED', 'STARTING', 'RUNNING', 'STOPPING', 'LOST') $$;

CREATE FUNCTION team_quota_usage_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') AND shard_counts_against_quota(OLD.state) THEN
    INSERT INTO team_quota_usage (team_id, shards, bytes)
      VALUES (OLD.team_id, -1, -(OLD.bytes_per_gpu * OLD.gpu_count));
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') AND shard_counts_against_quota(NEW.state) THEN
    INSERT INTO team_quota_usage (team_id, shards, bytes)
      VALUES (NEW.team_id, 1, NEW.bytes_per_gpu * NEW.gpu_count);
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER shard_quota_usage_insert AFTER INSERT ON shard FOR EACH ROW
  WHEN (shard_counts_against_quota(NEW.state))
  EXECUTE FUNCTION team_quota_usage_record();

CREATE TRIGGER shard_quota_usage_update
  AFTER UPDATE OF state, bytes_per_gpu, gpu_count, team_id ON shard FOR EACH ROW
  WHEN (
    (shard_counts_against_quota(OLD.state) OR shard_counts_against_quota(NEW.state))
    AND (shard_counts_against_quota(OLD.state) IS DISTINCT FROM shard_counts_against_quota(NEW.state)
         OR OLD.bytes_per_gpu * OLD.gpu_count IS DISTINCT FROM NEW.bytes_per_gpu * NEW.gpu_count
         OR OLD.team_id IS DISTINCT FROM NEW.team_id))
  EXECUTE FUNCTION team_quota_usage_record();

CREATE TRIGGER shard_quota_usage_delete AFTER DELETE ON shard FOR EACH ROW
  WHEN (shard_counts_against_quota(OLD.state))
  EXECUTE FUNCTION team_quota_usage_record();

-- What the shards already there count.
INSERT INTO team_quota_usage (team_id, shards, bytes)
  SELECT team_id, count(*)::int, sum(bytes_per_gpu * gpu_count)::bigint
    FROM shard WHERE shard_counts_against_quota(state) GROUP BY team_id;

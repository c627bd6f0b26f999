-- AlterTable
ALTER TABLE "gpu" ADD COLUMN     "suspended_bytes" BIGINT NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "host" ADD COLUMN     "suspend_budget_bytes" BIGINT NOT NULL DEFAULT 0,
ADD COLUMN     "suspend_unavailable_reason" TEXT;

-- AlterTable
ALTER TABLE "quota_policy" ADD COLUMN     "allow_elastic" BOOLEAN NOT NULL DEFAULT false;

-- AlterTable
ALTER TABLE "shard" ADD COLUMN     "elastic" BOOLEAN NOT NULL DEFAULT false,
ADD COLUMN     "memory_move_error" TEXT,
ADD COLUMN     "memory_move_seconds" DOUBLE PRECISION,
ADD COLUMN     "memory_moved_bytes" BIGINT,
ADD COLUMN     "memory_total_bytes" BIGINT,
ADD COLUMN     "resume_wanted_at" TIMESTAMPTZ(3),
ADD COLUMN     "suspend_cause" TEXT;

-- AlterTable
ALTER TABLE "team" ADD COLUMN     "idle_suspend_after_seconds" INTEGER;

-- CreateTable
CREATE TABLE "shard_suspension" (
    "shard_id" UUID NOT NULL,
    "team_id" UUID NOT NULL,
    "bytes" BIGINT NOT NULL,
    "suspended_at" TIMESTAMPTZ(3) NOT NULL,
    "resumed_at" TIMESTAMPTZ(3),

    CONSTRAINT "shard_suspension_pkey" PRIMARY KEY ("shard_id","suspended_at")
);

-- CreateIndex
CREATE INDEX "shard_suspension_team_id_suspended_at_idx" ON "shard_suspension"("team_id", "suspended_at");

-- CreateIndex
CREATE INDEX "shard_resume_wanted_at_idx" ON "shard"("resume_wanted_at");

-- AddForeignKey
ALTER TABLE "shard_suspension" ADD CONSTRAINT "shard_suspension_shard_id_fkey" FOREIGN KEY ("shard_id") REFERENCES "shard"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- Hand-written (docs/elastic.md).
ALTER TABLE "shard_suspension" ADD CONSTRAINT "shard_suspension_bytes_check" CHECK (bytes >= 0),
  ADD CONSTRAINT "shard_suspension_resumed_check"
    CHECK (resumed_at IS NULL OR resumed_at >= suspended_at);
ALTER TABLE "gpu" ADD CONSTRAINT "gpu_suspended_bytes_check" CHECK (suspended_bytes >= 0);
ALTER TABLE "host" ADD CONSTRAINT "host_suspend_budget_bytes_check" CHECK (suspend_budget_bytes >= 0);
ALTER TABLE "team" ADD CONSTRAINT "team_idle_suspend_after_seconds_check"
  CHECK (idle_suspend_after_seconds IS NULL
         OR (idle_after_seconds IS NOT NULL AND idle_suspend_after_seconds >= idle_after_seconds));
ALTER TABLE "shard" ADD CONSTRAINT "shard_suspend_cause_check"
  CHECK (suspend_cause IS NULL
         OR suspend_cause IN ('suspend-requested', 'idle-suspend', 'make-room', 'reclaim'));
-- No CHECK ties reserved_bytes + suspended_bytes to floor(total_bytes × overcommit_ratio) as
-- placement does (libs/limits canReserve): a host that comes back with a LOST shard's memory
-- in host RAM must be able to take it back as SUSPENDED, whatever was placed meanwhile.

-- The fleet cache's change feed (migration 20261127211721_fleet_change_feed) also carries a
-- GPU's suspended caps and the memory processes of no shard hold there: placement reads both.
DROP TRIGGER gpu_reservations_changed_update ON gpu;
CREATE TRIGGER gpu_reservations_changed_update
  BEFORE UPDATE OF reserved_bytes, guaranteed_compute_permille, isolated_compute_permille,
                   suspended_bytes, unattributed_bytes
  ON gpu FOR EACH ROW
  WHEN (OLD.reserved_bytes IS DISTINCT FROM NEW.reserved_bytes
        OR OLD.guaranteed_compute_permille IS DISTINCT FROM NEW.guaranteed_compute_permille
        OR OLD.isolated_compute_permille IS DISTINCT FROM NEW.isolated_compute_permille
        OR OLD.suspended_bytes IS DISTINCT FROM NEW.suspended_bytes
        OR OLD.unattributed_bytes IS DISTINCT FROM NEW.unattributed_bytes)
  EXECUTE FUNCTION stamp_changed_xid();

-- libs/limits canReserve, for every conditional update that raises a GPU's reserved bytes
-- (placement, the queue, resize, a lost shard's return): room on the GPU as it is (its memory
-- less what processes of no shard hold: promised to nobody, issue #31) and within what the
-- caps on it and suspended may add up to (floor(total × ratio): elastic shards only).
CREATE FUNCTION gpu_memory_fits(total bigint, reserved bigint, suspended bigint, unowned bigint,
                                ratio double precision, added bigint) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT reserved + added <= total - unowned
           AND reserved + suspended + added <= floor(total * ratio) $$;

-- libs/limits canResume: a SUSPENDED shard's cap coming back to its GPU already counts among
-- the suspended bytes; only the room on the GPU as it is must hold.
CREATE FUNCTION gpu_resume_fits(total bigint, reserved bigint, unowned bigint, added bigint)
  RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT reserved + added <= total - unowned $$;

-- The idle policy's suspend has an event of its own (IDLE_SUSPEND, before its STATE event).
ALTER TABLE "shard_event" DROP CONSTRAINT "shard_event_kind_valid",
  ADD CONSTRAINT "shard_event_kind_valid" CHECK (
    "kind" IN ('STATE', 'VIOLATION', 'UNGOVERNED_COMPUTE', 'IDLE', 'IDLE_STOP', 'IDLE_SUSPEND'));

-- CreateEnum
CREATE TYPE "compute_mode" AS ENUM ('GUARANTEED', 'CAPPED');

-- AlterTable
ALTER TABLE "gpu" ADD COLUMN     "guaranteed_compute_permille" INTEGER NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "quota_policy" ADD COLUMN     "max_compute_share_percent" INTEGER;

-- AlterTable
ALTER TABLE "shard" ADD COLUMN     "compute_mode" "compute_mode" NOT NULL DEFAULT 'GUARANTEED',
ADD COLUMN     "compute_share_permille" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "idle_since" TIMESTAMPTZ(3);

-- AlterTable
ALTER TABLE "shard_gpu" ADD COLUMN     "compute_share_permille" INTEGER NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "team" ADD COLUMN     "idle_after_seconds" INTEGER,
ADD COLUMN     "idle_stop_after_seconds" INTEGER;

-- Hand-written: CHECK constraints (see the "CHECK:" comments in schema.prisma). The last line
-- behind placement's conditional update: a GPU never guarantees more than all of its time.
ALTER TABLE "gpu"
  ADD CONSTRAINT "gpu_guaranteed_compute_within_gpu" CHECK (
    "guaranteed_compute_permille" BETWEEN 0 AND 1000);

ALTER TABLE "quota_policy"
  ADD CONSTRAINT "quota_policy_compute_share_percent" CHECK (
    "max_compute_share_percent" IS NULL OR "max_compute_share_percent" BETWEEN 0 AND 100);

-- A capped shard needs a number to be capped at.
ALTER TABLE "shard"
  ADD CONSTRAINT "shard_compute_share_valid" CHECK (
    "compute_share_permille" BETWEEN 0 AND 1000
    AND ("compute_mode" = 'GUARANTEED' OR "compute_share_permille" > 0));

ALTER TABLE "shard_gpu"
  ADD CONSTRAINT "shard_gpu_compute_share_valid" CHECK (
    "compute_share_permille" BETWEEN 0 AND 1000);

-- A shard is reported idle before it is stopped, so stopping needs an idle time at or above it.
ALTER TABLE "team"
  ADD CONSTRAINT "team_idle_policy_valid" CHECK (
    ("idle_after_seconds" IS NULL OR "idle_after_seconds" >= 60)
    AND ("idle_stop_after_seconds" IS NULL
         OR ("idle_after_seconds" IS NOT NULL
             AND "idle_stop_after_seconds" >= "idle_after_seconds")));

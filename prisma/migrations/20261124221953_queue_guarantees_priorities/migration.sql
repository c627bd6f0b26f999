-- AlterTable
ALTER TABLE "quota_policy" ADD COLUMN     "guarantee_bytes" BIGINT NOT NULL DEFAULT 0,
ADD COLUMN     "guarantee_gpu_model" TEXT,
ADD COLUMN     "guarantee_gpus" INTEGER,
ADD COLUMN     "max_priority_class" TEXT;

-- AlterTable
ALTER TABLE "shard" ADD COLUMN     "expires_at" TIMESTAMPTZ(3),
ADD COLUMN     "priority_class" TEXT NOT NULL DEFAULT 'build',
ADD COLUMN     "queued_at" TIMESTAMPTZ(3),
ADD COLUMN     "reclaim_for" UUID,
ADD COLUMN     "requeue" BOOLEAN NOT NULL DEFAULT true,
ADD COLUMN     "stop_intent" TEXT;

-- CreateIndex
CREATE INDEX "shard_reclaim_for_idx" ON "shard"("reclaim_for");

-- Hand-written: the guarantee is a size, the stop intent one of two words.
ALTER TABLE "quota_policy" ADD CONSTRAINT "quota_policy_guarantee_check"
  CHECK (guarantee_bytes >= 0 AND (guarantee_gpus IS NULL OR guarantee_gpus >= 0));
ALTER TABLE "shard" ADD CONSTRAINT "shard_stop_intent_check"
  CHECK (stop_intent IS NULL OR stop_intent IN ('requeue', 'preempt'));

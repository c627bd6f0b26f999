-- AlterTable
ALTER TABLE "shard_gpu" ADD COLUMN     "busy_ratio" DOUBLE PRECISION,
ADD COLUMN     "last_kernel_at" TIMESTAMPTZ(3);

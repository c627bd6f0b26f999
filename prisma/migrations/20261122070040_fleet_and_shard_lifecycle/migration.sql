-- AlterTable
ALTER TABLE "gpu" ADD COLUMN     "missing_since" TIMESTAMPTZ(3);

-- AlterTable
ALTER TABLE "host" ADD COLUMN     "cordoned" BOOLEAN NOT NULL DEFAULT false;

-- AlterTable
ALTER TABLE "shard" ADD COLUMN     "last_event_at" TIMESTAMPTZ(3);

-- AlterTable
ALTER TABLE "shard_gpu" DROP CONSTRAINT "shard_gpu_pkey",
ADD CONSTRAINT "shard_gpu_pkey" PRIMARY KEY ("shard_id", "gpu_uuid", "reserved_at");

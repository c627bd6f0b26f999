-- CreateEnum
CREATE TYPE "cap_policy" AS ENUM ('KILL', 'STOP', 'REPORT');

-- AlterTable
ALTER TABLE "gpu" ADD COLUMN     "unattributed_bytes" BIGINT NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "shard_gpu" ADD COLUMN     "real_bytes" BIGINT;

-- AlterTable
ALTER TABLE "team" ADD COLUMN     "cap_policy" "cap_policy";

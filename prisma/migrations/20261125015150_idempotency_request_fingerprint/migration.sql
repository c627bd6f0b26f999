-- AlterTable
ALTER TABLE "shard" ADD COLUMN     "request_fingerprint" TEXT;

-- AlterTable
ALTER TABLE "shard" ADD COLUMN     "secret_env" JSONB NOT NULL DEFAULT '{}';

-- CreateEnum
CREATE TYPE "token_role" AS ENUM ('ADMIN', 'MEMBER', 'VIEWER');

-- CreateEnum
CREATE TYPE "host_state" AS ENUM ('ONLINE', 'OFFLINE', 'CORDONED', 'DRAINING');

-- CreateEnum
CREATE TYPE "placement_policy" AS ENUM ('BINPACK', 'SPREAD');

-- CreateEnum
CREATE TYPE "shard_state" AS ENUM ('PLACED', 'STARTING', 'RUNNING', 'STOPPING', 'STOPPED', 'EXITED', 'FAILED', 'LOST', 'DELETED');

-- CreateTable
CREATE TABLE "team" (
    "id" UUID NOT NULL,
    "name" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "team_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "quota_policy" (
    "team_id" UUID NOT NULL,
    "max_total_bytes" BIGINT NOT NULL,
    "max_shards" INTEGER NOT NULL,
    "max_bytes_per_shard" BIGINT NOT NULL,
    "max_gpus_per_shard" INTEGER,
    "allowed_gpu_models" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "priority" INTEGER NOT NULL DEFAULT 0,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "quota_policy_pkey" PRIMARY KEY ("team_id")
);

-- CreateTable
CREATE TABLE "api_token" (
    "id" UUID NOT NULL,
    "team_id" UUID,
    "role" "token_role" NOT NULL,
    "name" TEXT NOT NULL,
    "token_hash" TEXT NOT NULL,
    "prefix" TEXT NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "last_used_at" TIMESTAMPTZ(3),
    "revoked_at" TIMESTAMPTZ(3),

    CONSTRAINT "api_token_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "host" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "state" "host_state" NOT NULL DEFAULT 'ONLINE',
    "labels" JSONB NOT NULL DEFAULT '{}',
    "context_overhead_bytes" BIGINT NOT NULL DEFAULT 0,
    "agent_version" TEXT,
    "driver_version" TEXT,
    "cuda_version" TEXT,
    "simulated" BOOLEAN NOT NULL DEFAULT false,
    "last_heartbeat_at" TIMESTAMPTZ(3),
    "registered_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "host_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "gpu" (
    "uuid" TEXT NOT NULL,
    "host_id" TEXT NOT NULL,
    "index" INTEGER NOT NULL,
    "model" TEXT NOT NULL,
    "total_bytes" BIGINT NOT NULL,
    "reserved_bytes" BIGINT NOT NULL DEFAULT 0,
    "used_bytes" BIGINT NOT NULL DEFAULT 0,
    "overcommit_ratio" DOUBLE PRECISION NOT NULL DEFAULT 1.0,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "gpu_pkey" PRIMARY KEY ("uuid")
);

-- CreateTable
CREATE TABLE "shard" (
    "id" UUID NOT NULL,
    "team_id" UUID NOT NULL,
    "name" TEXT NOT NULL,
    "image" TEXT NOT NULL,
    "command" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "env" JSONB NOT NULL DEFAULT '{}',
    "bytes_per_gpu" BIGINT NOT NULL,
    "gpu_count" INTEGER NOT NULL,
    "limit_bytes_per_gpu" BIGINT NOT NULL,
    "gpu_model_include" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "gpu_model_exclude" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "host_selector" JSONB NOT NULL DEFAULT '{}',
    "placement_policy" "placement_policy" NOT NULL DEFAULT 'BINPACK',
    "state" "shard_state" NOT NULL DEFAULT 'PLACED',
    "host_id" TEXT,
    "failure_reason" TEXT,
    "exit_code" INTEGER,
    "idempotency_key" TEXT,
    "container_id" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    "started_at" TIMESTAMPTZ(3),
    "stopped_at" TIMESTAMPTZ(3),
    "version" INTEGER NOT NULL DEFAULT 0,

    CONSTRAINT "shard_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "shard_gpu" (
    "shard_id" UUID NOT NULL,
    "gpu_uuid" TEXT NOT NULL,
    "reserved_bytes" BIGINT NOT NULL,
    "used_bytes" BIGINT NOT NULL DEFAULT 0,
    "reserved_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "released_at" TIMESTAMPTZ(3),

    CONSTRAINT "shard_gpu_pkey" PRIMARY KEY ("shard_id","gpu_uuid")
);

-- CreateTable
CREATE TABLE "usage_sample" (
    "shard_id" UUID NOT NULL,
    "gpu_uuid" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "used_bytes" BIGINT NOT NULL,

    CONSTRAINT "usage_sample_pkey" PRIMARY KEY ("shard_id","gpu_uuid","at")
);

-- CreateTable
CREATE TABLE "usage_rollup" (
    "shard_id" UUID NOT NULL,
    "hour" TIMESTAMPTZ(3) NOT NULL,
    "team_id" UUID NOT NULL,
    "reserved_byte_seconds" BIGINT NOT NULL DEFAULT 0,
    "used_byte_seconds" BIGINT NOT NULL DEFAULT 0,
    "peak_bytes" BIGINT NOT NULL DEFAULT 0,

    CONSTRAINT "usage_rollup_pkey" PRIMARY KEY ("shard_id","hour")
);

-- CreateTable
CREATE TABLE "audit_event" (
    "id" UUID NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "actor_token_id" UUID,
    "actor_role" "token_role",
    "team_id" UUID,
    "action" TEXT NOT NULL,
    "target_type" TEXT NOT NULL,
    "target_id" TEXT NOT NULL,
    "details" JSONB NOT NULL DEFAULT '{}',

    CONSTRAINT "audit_event_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "team_name_key" ON "team"("name");

-- CreateIndex
CREATE UNIQUE INDEX "api_token_token_hash_key" ON "api_token"("token_hash");

-- CreateIndex
CREATE INDEX "api_token_team_id_idx" ON "api_token"("team_id");

-- CreateIndex
CREATE INDEX "host_state_idx" ON "host"("state");

-- CreateIndex
CREATE INDEX "gpu_host_id_idx" ON "gpu"("host_id");

-- CreateIndex
CREATE INDEX "shard_team_id_state_idx" ON "shard"("team_id", "state");

-- CreateIndex
CREATE INDEX "shard_host_id_state_idx" ON "shard"("host_id", "state");

-- CreateIndex
CREATE INDEX "shard_state_idx" ON "shard"("state");

-- CreateIndex
CREATE UNIQUE INDEX "shard_team_id_idempotency_key_key" ON "shard"("team_id", "idempotency_key");

-- CreateIndex
CREATE INDEX "shard_gpu_gpu_uuid_released_at_idx" ON "shard_gpu"("gpu_uuid", "released_at");

-- CreateIndex
CREATE INDEX "usage_rollup_team_id_hour_idx" ON "usage_rollup"("team_id", "hour");

-- CreateIndex
CREATE INDEX "audit_event_team_id_at_idx" ON "audit_event"("team_id", "at");

-- CreateIndex
CREATE INDEX "audit_event_target_type_target_id_idx" ON "audit_event"("target_type", "target_id");

-- CreateIndex
CREATE INDEX "audit_event_at_idx" ON "audit_event"("at");

-- AddForeignKey
ALTER TABLE "quota_policy" ADD CONSTRAINT "quota_policy_team_id_fkey" FOREIGN KEY ("team_id") REFERENCES "team"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "api_token" ADD CONSTRAINT "api_token_team_id_fkey" FOREIGN KEY ("team_id") REFERENCES "team"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "gpu" ADD CONSTRAINT "gpu_host_id_fkey" FOREIGN KEY ("host_id") REFERENCES "host"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "shard" ADD CONSTRAINT "shard_team_id_fkey" FOREIGN KEY ("team_id") REFERENCES "team"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "shard" ADD CONSTRAINT "shard_host_id_fkey" FOREIGN KEY ("host_id") REFERENCES "host"("id") ON DELETE SET NULL ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "shard_gpu" ADD CONSTRAINT "shard_gpu_shard_id_fkey" FOREIGN KEY ("shard_id") REFERENCES "shard"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "shard_gpu" ADD CONSTRAINT "shard_gpu_gpu_uuid_fkey" FOREIGN KEY ("gpu_uuid") REFERENCES "gpu"("uuid") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "usage_sample" ADD CONSTRAINT "usage_sample_shard_id_fkey" FOREIGN KEY ("shard_id") REFERENCES "shard"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "usage_rollup" ADD CONSTRAINT "usage_rollup_shard_id_fkey" FOREIGN KEY ("shard_id") REFERENCES "shard"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "usage_rollup" ADD CONSTRAINT "usage_rollup_team_id_fkey" FOREIGN KEY ("team_id") REFERENCES "team"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- Hand-written: CHECK constraints. Prisma's schema language cannot express them and the
-- schema engine's diff ignores them, so they are added here, by hand, and listed in a
-- "CHECK:" comment above each model in schema.prisma.

-- AddCheckConstraint
ALTER TABLE "quota_policy"
  ADD CONSTRAINT "quota_policy_limits_non_negative" CHECK (
    "max_total_bytes" >= 0 AND "max_shards" >= 0 AND "max_bytes_per_shard" >= 0
    AND ("max_gpus_per_shard" IS NULL OR "max_gpus_per_shard" >= 1)
  );

-- AddCheckConstraint
ALTER TABLE "host"
  ADD CONSTRAINT "host_context_overhead_non_negative" CHECK ("context_overhead_bytes" >= 0);

-- AddCheckConstraint
-- The last line against overcommit: placement raises reserved_bytes with a conditional
-- UPDATE, and this rejects any write that would still go past the GPU's capacity.
-- 'Infinity' excludes NaN too (PostgreSQL orders NaN above every number).
ALTER TABLE "gpu"
  ADD CONSTRAINT "gpu_sizes_non_negative" CHECK ("total_bytes" >= 0 AND "used_bytes" >= 0),
  ADD CONSTRAINT "gpu_overcommit_ratio_finite_positive" CHECK (
    "overcommit_ratio" > 0 AND "overcommit_ratio" < 'Infinity'
  ),
  ADD CONSTRAINT "gpu_reserved_within_capacity" CHECK (
    "reserved_bytes" >= 0 AND "reserved_bytes" <= floor("total_bytes" * "overcommit_ratio")
  );

-- AddCheckConstraint
ALTER TABLE "shard"
  ADD CONSTRAINT "shard_request_valid" CHECK (
    "bytes_per_gpu" > 0 AND "gpu_count" >= 1 AND "limit_bytes_per_gpu" >= "bytes_per_gpu"
  ),
  ADD CONSTRAINT "shard_version_non_negative" CHECK ("version" >= 0);

-- AddCheckConstraint
ALTER TABLE "shard_gpu"
  ADD CONSTRAINT "shard_gpu_sizes_non_negative" CHECK ("reserved_bytes" >= 0 AND "used_bytes" >= 0);

-- AddCheckConstraint
ALTER TABLE "usage_sample"
  ADD CONSTRAINT "usage_sample_used_non_negative" CHECK ("used_bytes" >= 0);

-- AddCheckConstraint
ALTER TABLE "usage_rollup"
  ADD CONSTRAINT "usage_rollup_sizes_non_negative" CHECK (
    "reserved_byte_seconds" >= 0 AND "used_byte_seconds" >= 0 AND "peak_bytes" >= 0
  );

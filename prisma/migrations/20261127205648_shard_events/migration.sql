-- CreateTable
CREATE TABLE "shard_event" (
    "id" BIGSERIAL NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "shard_id" UUID NOT NULL,
    "team_id" UUID NOT NULL,
    "kind" TEXT NOT NULL,
    "previous_state" TEXT,
    "state" TEXT NOT NULL,
    "details" JSONB NOT NULL DEFAULT '{}',

    CONSTRAINT "shard_event_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "shard_event_shard_id_at_idx" ON "shard_event"("shard_id", "at");

-- CreateIndex
CREATE INDEX "shard_event_team_id_at_idx" ON "shard_event"("team_id", "at");

-- CreateIndex
CREATE INDEX "shard_event_at_idx" ON "shard_event"("at");

-- Hand-written: CHECK constraints (see the "CHECK:" comment in schema.prisma).
ALTER TABLE "shard_event"
  ADD CONSTRAINT "shard_event_kind_valid" CHECK (
    "kind" IN ('STATE', 'VIOLATION', 'UNGOVERNED_COMPUTE', 'IDLE', 'IDLE_STOP'));

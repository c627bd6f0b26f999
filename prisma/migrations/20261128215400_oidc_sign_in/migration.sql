-- AlterTable
ALTER TABLE "api_token" ADD COLUMN     "owner_person_id" UUID;

-- AlterTable
ALTER TABLE "audit_event" ADD COLUMN     "actor_email" TEXT,
ADD COLUMN     "actor_subject" TEXT;

-- CreateTable
CREATE TABLE "person" (
    "id" UUID NOT NULL,
    "issuer" TEXT NOT NULL,
    "subject" TEXT NOT NULL,
    "email" TEXT,
    "name" TEXT,
    "groups" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "last_sign_in_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "person_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "web_session" (
    "id" UUID NOT NULL,
    "token_hash" TEXT NOT NULL,
    "person_id" UUID NOT NULL,
    "role" "token_role" NOT NULL,
    "team_id" UUID,
    "memberships" JSONB NOT NULL DEFAULT '[]',
    "refresh_token" TEXT,
    "id_token" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" TIMESTAMPTZ(3) NOT NULL,
    "recheck_at" TIMESTAMPTZ(3) NOT NULL,
    "ended_at" TIMESTAMPTZ(3),
    "end_reason" TEXT,

    CONSTRAINT "web_session_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "group_mapping" (
    "id" UUID NOT NULL,
    "group" TEXT NOT NULL,
    "team_id" UUID,
    "role" "token_role" NOT NULL,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "group_mapping_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "person_issuer_subject_key" ON "person"("issuer", "subject");

-- CreateIndex
CREATE UNIQUE INDEX "web_session_token_hash_key" ON "web_session"("token_hash");

-- CreateIndex
CREATE INDEX "web_session_person_id_idx" ON "web_session"("person_id");

-- CreateIndex
CREATE INDEX "web_session_recheck_at_idx" ON "web_session"("recheck_at");

-- CreateIndex
CREATE INDEX "group_mapping_team_id_idx" ON "group_mapping"("team_id");

-- CreateIndex
CREATE UNIQUE INDEX "group_mapping_group_team_id_key" ON "group_mapping"("group", "team_id");

-- AddForeignKey
ALTER TABLE "api_token" ADD CONSTRAINT "api_token_owner_person_id_fkey" FOREIGN KEY ("owner_person_id") REFERENCES "person"("id") ON DELETE SET NULL ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "web_session" ADD CONSTRAINT "web_session_person_id_fkey" FOREIGN KEY ("person_id") REFERENCES "person"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- Hand-written (docs/database.md, "CHECK constraints"): ADMIN is fleet-wide, any other role is
-- a team's.
ALTER TABLE "group_mapping" ADD CONSTRAINT "group_mapping_role_team"
  CHECK (("role" = 'ADMIN') = ("team_id" IS NULL));

-- AlterTable
ALTER TABLE "web_session" ADD COLUMN     "provider_sid" TEXT;

-- CreateIndex
CREATE INDEX "web_session_provider_sid_idx" ON "web_session"("provider_sid");

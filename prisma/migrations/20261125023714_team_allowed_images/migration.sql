-- AlterTable
ALTER TABLE "quota_policy" ADD COLUMN     "allowed_images" TEXT[] DEFAULT ARRAY[]::TEXT[];

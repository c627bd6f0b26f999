-- AlterTable
ALTER TABLE "api_token" ADD COLUMN     "max_concurrent" INTEGER,
ADD COLUMN     "rate_burst" INTEGER,
ADD COLUMN     "rate_per_second" INTEGER;

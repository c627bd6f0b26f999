-- AlterEnum
ALTER TYPE "compute_mode" ADD VALUE 'ISOLATED';

-- AlterTable
ALTER TABLE "gpu" ADD COLUMN     "isolated_compute_permille" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "isolated_pool_permille" INTEGER NOT NULL DEFAULT 0;

-- Hand-written: CHECK constraints (see the "CHECK:" comments in schema.prisma). The pool is what
-- an agent reports (HostInfo.isolatedComputePermille, at most 90%). The isolated total is part of
-- the guaranteed total; it is not tied to the pool here, because an agent that registers again
-- with a smaller pool while isolated shards run must not fail: the conditional updates that
-- raise it keep new reservations within the pool.
ALTER TABLE "gpu"
  ADD CONSTRAINT "gpu_isolated_pool_valid" CHECK (
    "isolated_pool_permille" BETWEEN 0 AND 900);

ALTER TABLE "gpu"
  ADD CONSTRAINT "gpu_isolated_compute_within_guaranteed" CHECK (
    "isolated_compute_permille" BETWEEN 0 AND 1000
    AND "isolated_compute_permille" <= "guaranteed_compute_permille");

-- The fit rule of libs/limits computeShareFits, for the conditional updates that raise a GPU's
-- compute (createShard's batch, the queue's placements, a lost shard taken back,
-- setShardCompute): `added` more guaranteed permille, `added_isolated` of it for ISOLATED shards.
-- Isolated shares fit within the host's pool, the others within 1000 − pool, all within 1000; a
-- side that does not grow always fits (a pool may have changed under running shards).
CREATE FUNCTION gpu_compute_fits(guaranteed int, isolated int, pool int, added int,
                                 added_isolated int)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT guaranteed + added <= 1000
     AND (added_isolated <= 0 OR isolated + added_isolated <= pool)
     AND (added - added_isolated <= 0
          OR guaranteed - isolated + added - added_isolated <= 1000 - pool)
$$;

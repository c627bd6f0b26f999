-- Elastic memory (docs/elastic.md): a shard's GPU memory moved to host RAM and back.
ALTER TYPE "shard_state" ADD VALUE 'SUSPENDING' AFTER 'RUNNING';
ALTER TYPE "shard_state" ADD VALUE 'SUSPENDED' AFTER 'SUSPENDING';
ALTER TYPE "shard_state" ADD VALUE 'RESUMING' AFTER 'SUSPENDED';

-- Hand-written: no change to schema.prisma.
--
-- Room on each page for the rows heartbeats rewrite: the host (last_heartbeat_at), its GPUs
-- (used and unattributed bytes) and its shards' live reservations (used and real bytes, busy
-- ratio, last kernel). None of those columns is indexed, so each update can be HOT (the new
-- row version on the same page, no index entry), but only where the page has room for it: at
-- the default fillfactor of 100 the rows were packed full when inserted, and the fleet
-- simulator measured every GPU update and most host and reservation updates going to another
-- page (bench/README.md, 2026-11-29 third session): three index entries and a second WAL
-- record (the old version's lock) per GPU row written. Applies to pages written from now on;
-- an existing database gets it for its current rows with VACUUM FULL of the three tables.
ALTER TABLE "host" SET (fillfactor = 50);
ALTER TABLE "gpu" SET (fillfactor = 50);
ALTER TABLE "shard_gpu" SET (fillfactor = 70);

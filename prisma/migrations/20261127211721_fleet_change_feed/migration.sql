-- AlterTable
ALTER TABLE "gpu" ADD COLUMN     "reservations_changed_xid" BIGINT NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "host" ADD COLUMN     "changed_xid" BIGINT NOT NULL DEFAULT 0;

-- CreateIndex
CREATE INDEX "gpu_reservations_changed_xid_idx" ON "gpu"("reservations_changed_xid");

-- CreateIndex
CREATE INDEX "host_changed_xid_idx" ON "host"("changed_xid");

-- Hand-written: the fleet cache's change feed (apps/control-plane/src/placement/fleet-cache.ts).
-- Every statement that changes a GPU's reserved bytes or compute shares, or what placement reads
-- of a host, whatever its SQL, stamps the row with its transaction's id (xid8, 64 bits: no
-- wraparound). The cache's periodic read fetches only the rows stamped at or above the oldest
-- transaction still running at its previous read (pg_snapshot_xmin of that read's snapshot): a
-- transaction below that had ended then, and that read saw its rows. Heartbeats (gpu.used_bytes,
-- host.last_heartbeat_at) fire neither trigger: their updates stay HOT. A reservation change is
-- no longer a HOT update (the stamp is indexed, so the periodic read touches only the changed
-- rows): about 30 µs of PostgreSQL CPU and 340 bytes of WAL more per GPU row changed than
-- before the feed (bench/README.md, fleet section: the trade-off against a scan without it).
CREATE FUNCTION stamp_changed_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_TABLE_NAME = 'gpu' THEN
    NEW.reservations_changed_xid := pg_current_xact_id()::text::bigint;
  ELSE
    NEW.changed_xid := pg_current_xact_id()::text::bigint;
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER gpu_reservations_changed_insert BEFORE INSERT ON gpu FOR EACH ROW
  EXECUTE FUNCTION stamp_changed_xid();

CREATE TRIGGER gpu_reservations_changed_update
  BEFORE UPDATE OF reserved_bytes, guaranteed_compute_permille, isolated_compute_permille
  ON gpu FOR EACH ROW
  WHEN (OLD.reserved_bytes IS DISTINCT FROM NEW.reserved_bytes
        OR OLD.guaranteed_compute_permille IS DISTINCT FROM NEW.guaranteed_compute_permille
        OR OLD.isolated_compute_permille IS DISTINCT FROM NEW.isolated_compute_permille)
  EXECUTE FUNCTION stamp_changed_xid();

CREATE TRIGGER host_changed_insert BEFORE INSERT ON host FOR EACH ROW
  EXECUTE FUNCTION stamp_changed_xid();

CREATE TRIGGER host_changed_update
  BEFORE UPDATE OF name, state, labels, context_overhead_bytes, cordoned, updated_at
  ON host FOR EACH ROW
  WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.state IS DISTINCT FROM NEW.state
        OR OLD.labels IS DISTINCT FROM NEW.labels
        OR OLD.context_overhead_bytes IS DISTINCT FROM NEW.context_overhead_bytes
        OR OLD.cordoned IS DISTINCT FROM NEW.cordoned
        OR OLD.updated_at IS DISTINCT FROM NEW.updated_at)
  EXECUTE FUNCTION stamp_changed_xid();

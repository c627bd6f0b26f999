// The fleet's host rows written by SQL as the control plane writes them, for the benches that
// need a 1,000-host fleet without 1,000 registrations.

/** Inserts hosts host-0000 … (online, simulated, seen now) with `overheadBytes` of context each. */
export async function insertHosts(sql, count, overheadBytes) {
  await sql.query(
    `INSERT INTO host (id, name, labels, context_overhead_bytes, agent_version, driver_version,
                       cuda_version, simulated, last_heartbeat_at, updated_at)
     SELECT 'host-' || lpad(n::text, 4, '0'), 'host-' || lpad(n::text, 4, '0'), '{}', $1,
            'bench', '550.54', '12.4', true, now(), now()
       FROM generate_series(0, $2 - 1) AS n`,
    [String(overheadBytes), count],
  );
}

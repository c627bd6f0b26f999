// The fleet's rows written by SQL as the control plane writes them, for the benches that need a
// large fleet without registering every host.

const GiB = 2 ** 30;
const MiB = 2 ** 20;

/**
 * Inserts hosts host-0000 … (online, simulated) with `overheadBytes` of context each.
 * `idDigits`: the digits of the host number in its id (more than 4 for 10,000 hosts or more);
 * `heartbeatAheadSeconds`: their last heartbeat that far from now (a day ahead keeps every host
 * from going silent during a bench).
 */
export async function insertHosts(
  sql,
  count,
  overheadBytes,
  { idDigits = 4, heartbeatAheadSeconds = 0 } = {},
) {
  await sql.query(
    `INSERT INTO host (id, name, labels, context_overhead_bytes, agent_version, driver_version,
                       cuda_version, simulated, last_heartbeat_at, updated_at)
     SELECT 'host-' || lpad(n::text, $3, '0'), 'host-' || lpad(n::text, $3, '0'), '{}', $1,
            'bench', '550.54', '12.4', true, now() + $4 * interval '1 second', now()
       FROM generate_series(0, $2 - 1) AS n`,
    [String(overheadBytes), count, idDigits, heartbeatAheadSeconds],
  );
}

/**
 * An empty fleet and its one team: `hosts` hosts (insertHosts, 512 MiB of context each; `idDigits`
 * and `heartbeatAheadSeconds` as there) of `gpusPerHost` 80 GiB GPUs, and a team 'bench' whose
 * quota holds a million shards. Resolves to the team's id.
 */
export async function insertFleet(
  sql,
  { hosts, gpusPerHost, idDigits = 4, heartbeatAheadSeconds = 0 },
) {
  await insertHosts(sql, hosts, 512 * MiB, { idDigits, heartbeatAheadSeconds });
  await sql.query(
    `INSERT INTO gpu (uuid, host_id, index, model, total_bytes, used_bytes, updated_at)
     SELECT 'GPU-' || host.id || '-' || i, host.id, i, 'NVIDIA H100 80GB HBM3', $1, 0, now()
       FROM host, generate_series(0, $2 - 1) AS i`,
    [String(80 * GiB), gpusPerHost],
  );
  const {
    rows: [team],
  } = await sql.query(
    `INSERT INTO team (id, name) VALUES (gen_random_uuid(), 'bench') RETURNING id`,
  );
  await sql.query(
    `INSERT INTO quota_policy (team_id, max_total_bytes, max_shards, max_bytes_per_shard, updated_at)
     VALUES ($1, $2, 1000000, $3, now())`,
    [team.id, String(2 ** 52), String(2 ** 45)],
  );
  return team.id;
}

/**
 * The queue benches' fleet: insertFleet's, each GPU full with one RUNNING 79 GiB shard (79.5 GiB
 * reserved with the overhead) written as createShard writes them (shard, its reservation, the
 * GPU's reserved bytes), and `pending` PENDING shards of 40 GiB behind them (40.5 reserved: one
 * fits where a full shard ended), all of the one team. Resolves to the team's id.
 */
export async function insertFullFleetWithQueue(sql, { hosts, gpusPerHost, pending }) {
  const teamId = await insertFleet(sql, { hosts, gpusPerHost });
  const limit = 79 * GiB + 512 * MiB;
  await sql.query(
    `WITH gpus AS (SELECT uuid, host_id, row_number() OVER (ORDER BY uuid) AS n FROM gpu),
          shards AS (
            INSERT INTO shard (id, team_id, name, image, bytes_per_gpu, gpu_count,
                               limit_bytes_per_gpu, state, host_id, updated_at, started_at)
            SELECT gen_random_uuid(), $1, 'full-' || n, 'bench/worker:1', $2, 1, $3, 'RUNNING',
                   host_id, now(), now() - (n || ' seconds')::interval
              FROM gpus RETURNING id, name)
     INSERT INTO shard_gpu (shard_id, gpu_uuid, reserved_bytes, reserved_at)
     SELECT shards.id, gpus.uuid, $3, now() FROM shards JOIN gpus ON shards.name = 'full-' || gpus.n`,
    [teamId, String(79 * GiB), String(limit)],
  );
  await sql.query(`UPDATE gpu SET reserved_bytes = $1`, [String(limit)]);
  await sql.query(
    `INSERT INTO shard (id, team_id, name, image, bytes_per_gpu, gpu_count, limit_bytes_per_gpu,
                        state, updated_at, queued_at)
     SELECT gen_random_uuid(), $1, 'pending-' || n, 'bench/worker:1', $2, 1, $2, 'PENDING', now(),
            now() + (n || ' milliseconds')::interval
       FROM generate_series(1, $3) AS n`,
    [teamId, String(40 * GiB), pending],
  );
  return teamId;
}

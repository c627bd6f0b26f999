// createShard's batches and their batch statements so far, from pg_stat_statements in the
// database of `stats`: a batch reads its teams once (the read that sets plan_cache_mode, in
// team-quota.ts) and runs the batch statement (write_batch) once, plus once more for each round
// of calls that lost their GPUs to another control plane (create-writes.ts, writePlanned).
export async function batchWrites(stats) {
  const { rows } = await stats.query(
    `SELECT coalesce(sum(calls) FILTER (WHERE query LIKE '%prepared:write_batch%'), 0)::bigint AS writes,
            coalesce(sum(calls) FILTER (WHERE query LIKE '%AS mode) AS setting%'), 0)::bigint AS batches
       FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  return { batches: Number(rows[0].batches), writes: Number(rows[0].writes) };
}

-- A suspended shard's cap is still its team's (docs/elastic.md): SUSPENDING, SUSPENDED and
-- RESUMING count against the quota, as libs/limits' countsAgainstQuota says. No row is in
-- these states yet, so team_quota_usage needs no correction. A migration of its own: a new
-- enum value cannot be used in the transaction that adds it.
CREATE OR REPLACE FUNCTION shard_counts_against_quota(state shard_state) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT state IN ('PENDING', 'PLACED', 'STARTING', 'RUNNING', 'SUSPENDING', 'SUSPENDED',
                         'RESUMING', 'STOPPING', 'LOST') $$;

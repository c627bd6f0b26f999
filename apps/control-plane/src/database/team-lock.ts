import type { RawSql } from './direct-sql.js';
import type { Prisma } from './generated/client.js';

/**
 * The first key of every team lock, so team locks never collide with other advisory locks
 * (the schema engine's migration lock uses key 72707369 with a first key of 0). "team".
 */
const TEAM_LOCK_SPACE = 0x7465616d;

/**
 * Serializes transactions per team: blocks until no other transaction holds the lock of
 * `teamId`, and holds it until this transaction commits or rolls back. Call it first in
 * any transaction that reads a team's usage and then writes on that basis (quota checks
 * before placement). Must run inside `$transaction(async (tx) => ...)`: outside one the
 * lock would be released at once. On PGlite (one connection) it is granted at once: its
 * transactions are serial anyway.
 */
export async function lockTeamForUpdate(
  tx: Prisma.TransactionClient,
  teamId: string,
): Promise<void> {
  // hashtext() may map two teams to one key; they then wait for each other, nothing worse.
  // executeRaw, not queryRaw: the function returns `void`, which the PGlite adapter cannot read.
  await tx.$executeRaw`SELECT pg_advisory_xact_lock(${TEAM_LOCK_SPACE}::int4, hashtext(${teamId}))`;
}

/**
 * lockTeamForUpdate for several teams at once (a batch of createShard calls): one statement
 * that takes the locks in key order, so two transactions locking overlapping sets always
 * queue behind each other instead of deadlocking. The caller must read what the locks guard
 * in a later statement: under READ COMMITTED a statement sees the database as it was when it
 * started, before it waited for the locks.
 */
export async function lockTeamsForUpdate(tx: RawSql, teamIds: readonly string[]): Promise<void> {
  if (teamIds.length === 0) return;
  await tx.$executeRaw`
    SELECT pg_advisory_xact_lock(${TEAM_LOCK_SPACE}::int4, key)
      FROM (SELECT DISTINCT hashtext(id) AS key FROM unnest(${[...teamIds]}::text[]) AS id
             ORDER BY key) AS keys`;
}

import type { Prisma } from './generated/client.js';

/**
 * The first key of every team lock, so team locks never collide with other advisory locks
 * (the schema engine's migration lock uses key 72707369 with a first key of 0). "team".
 * createShard takes the same locks inside `team_quota_states` (readTeamStates, lockAndFold).
 */
export const TEAM_LOCK_SPACE = 0x7465616d;

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

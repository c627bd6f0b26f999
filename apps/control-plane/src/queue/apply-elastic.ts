/**
 * Applies an admission pass's elastic decisions (docs/elastic.md): resumes of SUSPENDED shards
 * on their own GPUs (SUSPENDED → RESUMING, the cap taken back by a conditional update; a GPU
 * without the room fails the pass with StalePlan, as a placement does) and suspensions of
 * running elastic shards, idle ones to make room for a waiting shard or a reclaim's victims
 * (RUNNING → SUSPENDING; each keeps the shard it makes room for in reclaim_for until it is
 * SUSPENDED, so the next pass keeps that room for it).
 */
import type { Placement, Resume, Suspension } from '@gpushards/limits';
import type { RawSql } from '../database/index.js';
import type { ElasticMoves } from '../elastic/elastic-moves.js';
import { NotSuspendableError } from '../errors/domain-errors.js';
import type { CommitEffects, ShardLifecycle } from '../shards/shard-lifecycle.js';
import { StalePlan } from './apply-placements.js';

/**
 * Locks the GPUs that the pass's resumes and placements raise, in UUID order (the order every
 * writer of GPU rows takes them in), then applies the resumes. A resume whose shard is no
 * longer SUSPENDED (stopped, or resumed by another pass) is skipped.
 */
export async function applyResumes(
  tx: RawSql,
  moves: ElasticMoves,
  lifecycle: ShardLifecycle,
  resumes: readonly Resume[],
  placements: readonly Placement[],
  effects: CommitEffects,
): Promise<Resume[]> {
  if (resumes.length === 0) return [];
  const uuids = [
    ...new Set([...resumes, ...placements].flatMap((decided) => decided.placed.gpuUuids)),
  ].sort();
  await tx.$queryRaw`SELECT uuid FROM gpu WHERE uuid = ANY(${uuids}::text[]) ORDER BY uuid FOR UPDATE`;
  const locked = await lifecycle.lockMany(
    tx,
    resumes.map((resume) => resume.shardId),
  );
  const applied: Resume[] = [];
  for (const resume of resumes) {
    const shard = locked.get(resume.shardId);
    if (shard?.state !== 'SUSPENDED') continue;
    if (!(await moves.resume(tx, shard, effects))) throw new StalePlan([resume.placed.hostId]);
    applied.push(resume);
  }
  return applied;
}

/**
 * RUNNING → SUSPENDING for each suspension whose shard still runs; one its host can no longer
 * take (its budget changed since the pass read it) is skipped, and the next pass decides again.
 */
export async function applySuspensions(
  tx: RawSql,
  moves: ElasticMoves,
  lifecycle: ShardLifecycle,
  suspensions: readonly Suspension[],
  effects: CommitEffects,
): Promise<Suspension[]> {
  if (suspensions.length === 0) return [];
  const locked = await lifecycle.lockMany(
    tx,
    suspensions.map((suspension) => suspension.shardId),
  );
  const applied: Suspension[] = [];
  for (const suspension of suspensions) {
    const shard = locked.get(suspension.shardId);
    if (shard?.state !== 'RUNNING') continue;
    try {
      await moves.suspend(tx, shard, suspension.cause, effects);
    } catch (error) {
      if (error instanceof NotSuspendableError) continue;
      throw error;
    }
    await tx.$executeRaw`
      UPDATE shard SET reclaim_for = ${suspension.forShardId}::uuid
       WHERE id = ${suspension.shardId}::uuid`;
    applied.push(suspension);
  }
  return applied;
}

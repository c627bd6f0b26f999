import type { PrismaService } from '../database/index.js';
import type { Logger } from '../logging/logger.js';
import { tryLaunchSpecOf } from './launch-spec.js';
import { CommitEffects, type ShardLifecycle, type ShardMove } from './shard-lifecycle.js';
import type { ShardRecord } from './shard-record.js';

/**
 * Ends PLACED shards whose secret env this control plane cannot open (tryLaunchSpecOf) as
 * FAILED, the reason naming the key, their reservations released: no launch of theirs can
 * ever be sent from here, and left PLACED they would hold their GPUs forever. Each is locked
 * and checked again first (a shard another control plane launched or moved meanwhile is left
 * alone). Returns the ids failed.
 */
export async function failUnopenableLaunches(
  prisma: PrismaService,
  lifecycle: ShardLifecycle,
  logger: Logger,
  shardIds: readonly string[],
): Promise<string[]> {
  if (shardIds.length === 0) return [];
  const effects = new CommitEffects();
  const moves = await prisma.$transaction(async (tx) => {
    const locked = await lifecycle.lockMany(tx, shardIds);
    const failing: ShardMove[] = [];
    for (const shard of locked.values()) {
      const reason = unopenableReason(shard);
      if (shard.state !== 'PLACED' || reason === undefined) continue;
      failing.push({ shard, state: 'FAILED', cause: 'failed', fields: { failureReason: reason } });
    }
    await lifecycle.moveMany(tx, failing, effects);
    return failing;
  });
  lifecycle.afterCommit(effects);
  for (const { shard, fields } of moves) {
    logger.warn(
      {
        shardId: shard.id,
        teamId: shard.teamId,
        hostId: shard.hostId,
        reason: fields.failureReason,
      },
      'shard FAILED: its secret env does not open with the secrets keys this control plane holds',
    );
  }
  return moves.map((move) => move.shard.id);
}

function unopenableReason(shard: ShardRecord): string | undefined {
  const opened = tryLaunchSpecOf(shard, []);
  return 'unopenable' in opened ? opened.unopenable : undefined;
}

import type { ShardLaunchSpec } from '@gpushards/protocol';
import { computeSpecOf } from '../compute/compute-input.js';
import { openSealedEnv, SecretsKeyError } from '../secrets/secret-box.js';
import { stringRecord, type ShardRecord } from './shard-record.js';

/**
 * What the agent needs to run the shard: each GPU capped at limitBytesPerGpu (the request
 * plus the host's context overhead, what the GPU reserves), its compute share, and its
 * environment with the secret values opened (the one place they are: the agent link carries
 * them).
 */
export function launchSpecOf(shard: ShardRecord, gpuUuids: readonly string[]): ShardLaunchSpec {
  const limitBytes = Number(shard.limitBytesPerGpu);
  return {
    shardId: shard.id,
    teamId: shard.teamId,
    name: shard.name,
    image: shard.image,
    ...(shard.command.length > 0 ? { command: shard.command } : {}),
    env: { ...stringRecord(shard.env), ...openSealedEnv(stringRecord(shard.secretEnv)) },
    gpus: gpuUuids.map((uuid) => ({ uuid, limitBytes })),
    contextOverheadBytes: Number(shard.limitBytesPerGpu - shard.bytesPerGpu),
    // Always sent, 0 included: a share taken away must reach the agent's limits file too.
    compute: computeSpecOf({ sharePermille: shard.computeSharePermille, mode: shard.computeMode }),
  };
}

/**
 * launchSpecOf, or why this control plane cannot launch the shard: its secret env does not
 * open (sealed with a key it does not hold, or damaged). Such a shard never launches here, so
 * the callers fail it (FAILED, the reason naming the key) instead of retrying forever.
 */
export function tryLaunchSpecOf(
  shard: ShardRecord,
  gpuUuids: readonly string[],
): { readonly spec: ShardLaunchSpec } | { readonly unopenable: string } {
  try {
    return { spec: launchSpecOf(shard, gpuUuids) };
  } catch (error) {
    if (!(error instanceof SecretsKeyError)) throw error;
    return { unopenable: `cannot launch: ${error.message}` };
  }
}

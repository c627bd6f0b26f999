import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { PrismaClient } from '../database/index.js';
import { openSealedEnv, SecretBox, sealedKeyId } from './secret-box.js';
import {
  loadSecretsKey,
  NEXT_SECRETS_KEY_FILE,
  newSecretsKey,
  parseSecretsKey,
  readKeyFile,
  SECRETS_KEY_FILE,
  writeKeyFile,
} from './secrets-key.js';

export interface ResealResult {
  /** Shards whose secret env was sealed again. */
  readonly shards: number;
  readonly keyId: string;
}

/**
 * Opens every shard's secret env with the keys this process knows and seals it again with
 * `next`, in one transaction (all or nothing). Values already sealed with `next` are left as
 * they are, so running it again after an interruption is safe.
 */
export async function resealSecretEnv(
  prisma: PrismaClient,
  next: SecretBox,
): Promise<ResealResult> {
  const shards = await prisma.$transaction(
    async (tx) => {
      const rows = await tx.$queryRaw<{ id: string; secretEnv: Record<string, string> }[]>`
        SELECT id::text AS id, secret_env AS "secretEnv" FROM shard
         WHERE secret_env <> '{}'::jsonb ORDER BY id FOR UPDATE`;
      let changed = 0;
      for (const row of rows) {
        const stale = Object.values(row.secretEnv).some(
          (sealed) => sealedKeyId(sealed) !== next.keyId,
        );
        if (!stale) continue;
        const sealed = next.sealAll(openSealedEnv(row.secretEnv));
        await tx.$executeRaw`
          UPDATE shard SET secret_env = ${JSON.stringify(sealed)}::jsonb
           WHERE id = ${row.id}::uuid`;
        changed++;
      }
      return changed;
    },
    { maxWait: 10_000, timeout: 600_000 },
  );
  return { shards, keyId: next.keyId };
}

/**
 * Rotates the key file of a data folder: writes the new key beside the old
 * (secrets.key.next), seals every secret again with it, then replaces secrets.key. Interrupted
 * at any point, running it again finishes the job (a control plane that starts meanwhile loads
 * both keys).
 */
export async function rotateSecretsKeyFile(
  prisma: PrismaClient,
  dataDir: string,
): Promise<ResealResult> {
  const nextPath = join(dataDir, NEXT_SECRETS_KEY_FILE);
  await loadSecretsKey(dataDir, undefined);
  let nextKey = await readKeyFile(nextPath);
  if (nextKey === undefined) {
    await writeKeyFile(nextPath, newSecretsKey(), 'wx');
    nextKey = await readKeyFile(nextPath);
  }
  const result = await resealSecretEnv(prisma, new SecretBox(nextKey!));
  await writeKeyFile(join(dataDir, SECRETS_KEY_FILE), nextKey!, 'replace');
  await rm(nextPath, { force: true });
  return result;
}

/**
 * Rotates a key given in the environment: every secret opened with `current` (and `next`, for
 * a run that was interrupted) and sealed with `next`. The operator then sets
 * GPUSHARDS_SECRETS_KEY to the new key everywhere.
 */
export async function rotateSecretsKeyVariable(
  prisma: PrismaClient,
  current: string,
  next: string,
): Promise<ResealResult> {
  new SecretBox(parseSecretsKey(current, 'GPUSHARDS_SECRETS_KEY'));
  return resealSecretEnv(prisma, new SecretBox(parseSecretsKey(next, 'GPUSHARDS_SECRETS_NEW_KEY')));
}

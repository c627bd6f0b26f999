import { randomBytes } from 'node:crypto';
import { chmod, mkdir, open, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { SECRETS_KEY_BYTES, SecretBox, SecretsKeyError } from './secret-box.js';

/** The key's file in the data folder (base64 of 32 random bytes, mode 0600). */
export const SECRETS_KEY_FILE = 'secrets.key';
/** Written first by a rotation; its presence means a rotation did not finish. */
export const NEXT_SECRETS_KEY_FILE = 'secrets.key.next';
/** Overrides the file: base64 of 32 bytes (e.g. from a secret manager). */
export const SECRETS_KEY_VARIABLE = 'GPUSHARDS_SECRETS_KEY';

export function parseSecretsKey(text: string, source: string): Buffer {
  const trimmed = text.trim();
  const key = Buffer.from(trimmed, 'base64');
  if (key.length !== SECRETS_KEY_BYTES || key.toString('base64') !== trimmed) {
    throw new SecretsKeyError(
      `${source} must hold the base64 of ${SECRETS_KEY_BYTES} bytes (make one with "openssl rand -base64 32")`,
    );
  }
  return key;
}

export function newSecretsKey(): Buffer {
  return randomBytes(SECRETS_KEY_BYTES);
}

/**
 * The control plane's secrets key: $GPUSHARDS_SECRETS_KEY when set, else
 * <data folder>/secrets.key, created (0600, folder 0700) on first start. A key file left by
 * an unfinished rotation (secrets.key.next) is loaded too, so values sealed with either open.
 */
export async function loadSecretsKey(
  dataDir: string,
  fromEnv: string | undefined,
): Promise<SecretBox> {
  if (fromEnv !== undefined && fromEnv.trim() !== '') {
    return new SecretBox(parseSecretsKey(fromEnv, SECRETS_KEY_VARIABLE));
  }
  const path = join(dataDir, SECRETS_KEY_FILE);
  const next = await readKeyFile(join(dataDir, NEXT_SECRETS_KEY_FILE));
  if (next !== undefined) new SecretBox(next);
  const existing = await readKeyFile(path);
  if (existing !== undefined) return new SecretBox(existing);
  await writeKeyFile(path, newSecretsKey(), 'wx');
  // Read back: a control plane starting beside this one may have written it first.
  const written = await readKeyFile(path);
  if (written === undefined) throw new SecretsKeyError(`${path} vanished while it was created`);
  return new SecretBox(written);
}

export async function readKeyFile(path: string): Promise<Buffer | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  return parseSecretsKey(text, path);
}

/**
 * Writes a key file never readable by others. 'wx' fails when the file exists (two control
 * planes starting at once: the loser reads the winner's key); 'replace' swaps it atomically.
 */
export async function writeKeyFile(
  path: string,
  key: Buffer,
  mode: 'wx' | 'replace',
): Promise<void> {
  await mkdir(join(path, '..'), { recursive: true, mode: 0o700 });
  const target = mode === 'wx' ? path : `${path}.${process.pid}.tmp`;
  let file;
  try {
    file = await open(target, 'wx', 0o600);
  } catch (error) {
    if (mode === 'wx' && (error as NodeJS.ErrnoException).code === 'EEXIST') return;
    throw error;
  }
  try {
    await file.writeFile(`${key.toString('base64')}\n`);
    await file.sync();
  } finally {
    await file.close();
  }
  await chmod(target, 0o600);
  if (mode === 'replace') await rename(target, path);
}

import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

/** AES-256-GCM: 32-byte keys, 12-byte nonces, 16-byte tags. */
export const SECRETS_KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const FORMAT = 'v1';

export class SecretsKeyError extends Error {
  override readonly name = 'SecretsKeyError';
}

/** Short public name of a key, stored beside each value so that the right key opens it. */
export function secretsKeyId(key: Buffer): string {
  return createHash('sha256')
    .update('gpushards-secrets-key')
    .update(key)
    .digest('hex')
    .slice(0, 12);
}

/**
 * Every key this process knows, by id: values sealed with any of them open (a key being
 * rotated and its successor, several control planes in one test process).
 */
const knownKeys = new Map<string, Buffer>();

/**
 * Seals and opens secret environment values with AES-256-GCM. A sealed value is
 * "v1.<key id>.<nonce>.<ciphertext>.<tag>" (base64url parts); the variable's name is the
 * associated data, so a value moved to another name does not open.
 */
export class SecretBox {
  readonly keyId: string;

  constructor(private readonly key: Buffer) {
    if (key.length !== SECRETS_KEY_BYTES) {
      throw new SecretsKeyError(`a secrets key is ${SECRETS_KEY_BYTES} bytes, got ${key.length}`);
    }
    this.keyId = secretsKeyId(key);
    knownKeys.set(this.keyId, key);
  }

  seal(name: string, value: string): string {
    const nonce = randomBytes(NONCE_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key, nonce);
    cipher.setAAD(Buffer.from(name, 'utf8'));
    const ciphertext = Buffer.concat([cipher.update(value, 'utf8'), cipher.final()]);
    return [FORMAT, this.keyId, nonce, ciphertext, cipher.getAuthTag()]
      .map((part) => (typeof part === 'string' ? part : part.toString('base64url')))
      .join('.');
  }

  sealAll(env: Readonly<Record<string, string>>): Record<string, string> {
    return Object.fromEntries(
      Object.entries(env).map(([name, value]) => [name, this.seal(name, value)]),
    );
  }
}

/** The key id a sealed value names (undefined when it is not a sealed value). */
export function sealedKeyId(sealed: string): string | undefined {
  const parts = sealed.split('.');
  return parts.length === 5 && parts[0] === FORMAT ? parts[1] : undefined;
}

/** Opens a value sealed with any key this process knows; SecretsKeyError otherwise. */
export function openSealed(name: string, sealed: string): string {
  const parts = sealed.split('.');
  if (parts.length !== 5 || parts[0] !== FORMAT) {
    throw new SecretsKeyError(`secret "${name}" is not a sealed value`);
  }
  const [, keyId, nonce, ciphertext, tag] = parts as [string, string, string, string, string];
  const key = knownKeys.get(keyId);
  if (key === undefined) {
    throw new SecretsKeyError(
      `secret "${name}" was sealed with key ${keyId}, which this control plane does not hold (see "Secrets key" in docs/operations.md)`,
    );
  }
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(nonce, 'base64url'));
  decipher.setAAD(Buffer.from(name, 'utf8'));
  const tagBytes = Buffer.from(tag, 'base64url');
  if (tagBytes.length !== TAG_BYTES) throw new SecretsKeyError(`secret "${name}" is damaged`);
  decipher.setAuthTag(tagBytes);
  try {
    return Buffer.concat([
      decipher.update(Buffer.from(ciphertext, 'base64url')),
      decipher.final(),
    ]).toString('utf8');
  } catch {
    throw new SecretsKeyError(
      `secret "${name}" does not open with key ${keyId}: damaged or tampered`,
    );
  }
}

/** Opens every value of a stored secret env record ({"NAME": "<sealed>"}). */
export function openSealedEnv(sealed: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(sealed).map(([name, value]) => [name, openSealed(name, value)]),
  );
}

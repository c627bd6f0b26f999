import { hash, randomBytes } from 'node:crypto';

/** Every secret starts with this, so leaked tokens are easy to recognise and scan for. */
export const TOKEN_PREFIX = 'gps_';

/** How much of the secret is stored in clear (ApiToken.prefix) to tell tokens apart. */
const VISIBLE_PREFIX_LENGTH = TOKEN_PREFIX.length + 6;

/** 32 random bytes as base64url: 256 bits, 43 characters. */
const SECRET_SHAPE = /^gps_[A-Za-z0-9_-]{43}$/;

export interface NewTokenSecret {
  /** Shown to the caller once; never stored. */
  readonly secret: string;
  /** Lower-case hex sha256 of the whole secret: the only thing stored. */
  readonly hash: string;
  readonly prefix: string;
}

export function generateTokenSecret(): NewTokenSecret {
  const secret = TOKEN_PREFIX + randomBytes(32).toString('base64url');
  return { secret, hash: hashTokenSecret(secret), prefix: secret.slice(0, VISIBLE_PREFIX_LENGTH) };
}

/** One-shot `hash` rather than a Hash object: every request hashes its token (1.5 -> 0.5 µs). */
export function hashTokenSecret(secret: string): string {
  return hash('sha256', secret, 'hex');
}

/** Cheap shape check so that garbage never reaches the database lookup. */
export function looksLikeTokenSecret(value: string): boolean {
  return SECRET_SHAPE.test(value);
}

/** A signed-in browser's session secret (its cookie): its own prefix, never taken for a token. */
export const SESSION_PREFIX = 'gpss_';
const SESSION_SHAPE = /^gpss_[A-Za-z0-9_-]{43}$/;

export function generateSessionSecret(): { secret: string; hash: string } {
  const secret = SESSION_PREFIX + randomBytes(32).toString('base64url');
  return { secret, hash: hashTokenSecret(secret) };
}

export function looksLikeSessionSecret(value: string): boolean {
  return SESSION_SHAPE.test(value);
}

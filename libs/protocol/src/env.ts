import { z } from 'zod';

/**
 * Environment keys that users may not set, because the agent sets them to confine the
 * shard or because the loader/driver would read them before the interposer could act.
 * The control plane refuses a shard that sets one; the agent strips any that reach it
 * (a control plane built with an older list may still send them).
 *
 * Every `LD_*` key is refused (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH, LD_BIND_NOW, ...): they
 * steer the dynamic loader, which runs before the interposer. An image that needs
 * LD_LIBRARY_PATH sets it in its own ENV (the image is the allow-listed, reviewed part); the
 * interposer is loaded through /etc/ld.so.preload and must hold regardless. Keys are
 * case-sensitive, as the loader and the CUDA driver read them.
 */
export const RESERVED_ENV_KEYS: readonly string[] = [
  'CUDA_DEVICE_MEMORY_LIMIT', // the cap itself
  'CUDA_VISIBLE_DEVICES', // the agent maps the shard's GPUs
];

export const RESERVED_ENV_KEY_PREFIXES: readonly string[] = [
  'LD_', // the dynamic loader: LD_PRELOAD and LD_AUDIT load code ahead of the interposer
  'CUDA_DEVICE_MEMORY_LIMIT_', // per-device caps
  'NVIDIA_', // NVIDIA container toolkit: which host GPUs and driver parts enter the container
  'GPUSHARDS_', // our own configuration
  'CUDA_MPS_', // an MPS client's pipe folder and thread percentage: the host's partition
];

export function reservedEnvKey(key: string): boolean {
  return (
    RESERVED_ENV_KEYS.includes(key) ||
    RESERVED_ENV_KEY_PREFIXES.some((prefix) => key.startsWith(prefix))
  );
}

/** The reserved keys set in `env`, in the order they appear. */
export function findReservedEnvKeys(env: Readonly<Record<string, string>>): string[] {
  return Object.keys(env).filter(reservedEnvKey);
}

/** For the agent: `env` without reserved keys, and which keys were dropped (to log them). */
export function stripReservedEnvKeys(env: Readonly<Record<string, string>>): {
  env: Record<string, string>;
  stripped: string[];
} {
  const kept: Record<string, string> = {};
  const stripped: string[] = [];
  for (const [key, value] of Object.entries(env)) {
    if (reservedEnvKey(key)) stripped.push(key);
    else kept[key] = value;
  }
  return { env: kept, stripped };
}

export const ENV_KEY_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,255}$/;
export const MAX_ENV_ENTRIES = 128;
/** Sum over entries of UTF-8 bytes of `KEY=value`; keeps a launch spec well inside a NATS message. */
export const MAX_ENV_BYTES = 32 * 1024;

const utf8 = new TextEncoder();

const envKeySchema = z
  .string()
  .regex(
    ENV_KEY_PATTERN,
    'environment variable names must be 1-256 characters of A-Z, a-z, 0-9 and "_", not starting with a digit',
  );

const envValueSchema = z
  .string()
  .refine((value) => !value.includes('\0'), 'environment values cannot contain NUL characters');

/**
 * An environment as it travels in a launch spec: valid names, bounded size. It does not
 * refuse reserved keys (that would make a whole launch or reconcile reply undecodable
 * when the lists of two versions differ); use `userEnvSchema` on user input.
 */
export const envSchema = z.record(envKeySchema, envValueSchema).superRefine((env, ctx) => {
  const entries = Object.entries(env);
  if (entries.length > MAX_ENV_ENTRIES) {
    ctx.addIssue({
      code: 'custom',
      message: `at most ${MAX_ENV_ENTRIES} environment variables, got ${entries.length}`,
    });
  }
  const bytes = entries.reduce(
    (sum, [key, value]) => sum + utf8.encode(key).length + 1 + utf8.encode(value).length,
    0,
  );
  if (bytes > MAX_ENV_BYTES) {
    ctx.addIssue({
      code: 'custom',
      message: `the environment takes ${bytes} bytes, more than the ${MAX_ENV_BYTES} allowed`,
    });
  }
});

/** Marks the issue `userEnvSchema` raises (in `issue.params.reason`), for callers that map it to a code. */
export const RESERVED_ENV_KEY_ISSUE = 'RESERVED_ENV_KEY';

/** An environment a user asks for: everything `envSchema` checks, and no reserved keys. */
export const userEnvSchema = envSchema.superRefine((env, ctx) => {
  const reserved = findReservedEnvKeys(env);
  if (reserved.length > 0) {
    ctx.addIssue({
      code: 'custom',
      params: { reason: RESERVED_ENV_KEY_ISSUE, keys: reserved },
      message:
        `reserved environment variables cannot be set: ${reserved.join(', ')} ` +
        `(reserved: ${RESERVED_ENV_KEYS.join(', ')} and names starting with ${RESERVED_ENV_KEY_PREFIXES.join(', ')})`,
    });
  }
});

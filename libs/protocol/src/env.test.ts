import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import {
  MAX_ENV_BYTES,
  MAX_ENV_ENTRIES,
  RESERVED_ENV_KEY_ISSUE,
  envSchema,
  findReservedEnvKeys,
  reservedEnvKey,
  stripReservedEnvKeys,
  userEnvSchema,
} from './env.js';
import { formatIssues } from './codec.js';

describe('reserved environment keys', () => {
  test('the keys the agent owns are reserved', () => {
    for (const key of [
      'LD_PRELOAD',
      'LD_AUDIT',
      'LD_LIBRARY_PATH',
      'LD_BIND_NOW',
      'LD_DEBUG',
      'LD_',
      'CUDA_DEVICE_MEMORY_LIMIT',
      'CUDA_DEVICE_MEMORY_LIMIT_0',
      'CUDA_DEVICE_MEMORY_LIMIT_7',
      'CUDA_VISIBLE_DEVICES',
      'NVIDIA_VISIBLE_DEVICES',
      'NVIDIA_DRIVER_CAPABILITIES',
      'GPUSHARDS_REGION',
      'GPUSHARDS_',
      'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE',
      'CUDA_MPS_PIPE_DIRECTORY',
      'CUDA_MPS_CLIENT_PRIORITY',
    ]) {
      assert.equal(reservedEnvKey(key), true, key);
    }
  });

  test('ordinary keys and look-alikes are not', () => {
    for (const key of [
      'PATH',
      'LD',
      'OLD_LD_PATH',
      'HF_HOME',
      'CUDA_HOME',
      'CUDA_DEVICE_ORDER',
      'CUDA_DEVICE_MEMORY_LIMITS', // not the variable nor its `_<i>` form
      'CUDA_MPS', // only the CUDA_MPS_ prefix
      'ld_preload', // the loader reads the exact name
      'MY_GPUSHARDS_X',
      'NVIDIA',
    ]) {
      assert.equal(reservedEnvKey(key), false, key);
    }
  });

  test('find and strip', () => {
    const env = { A: '1', LD_PRELOAD: '/evil.so', B: '2', NVIDIA_VISIBLE_DEVICES: 'all' };
    assert.deepEqual(findReservedEnvKeys(env), ['LD_PRELOAD', 'NVIDIA_VISIBLE_DEVICES']);
    assert.deepEqual(stripReservedEnvKeys(env), {
      env: { A: '1', B: '2' },
      stripped: ['LD_PRELOAD', 'NVIDIA_VISIBLE_DEVICES'],
    });
    assert.deepEqual(findReservedEnvKeys({}), []);
  });

  test('userEnvSchema refuses reserved keys, naming them, with a recognisable issue', () => {
    const result = userEnvSchema.safeParse({ OK: 'x', LD_PRELOAD: 'a', GPUSHARDS_X: 'b' });
    assert.ok(!result.success);
    const [issue] = result.error.issues;
    assert.ok(issue?.code === 'custom');
    assert.deepEqual(issue.params, {
      reason: RESERVED_ENV_KEY_ISSUE,
      keys: ['LD_PRELOAD', 'GPUSHARDS_X'],
    });
    assert.match(
      formatIssues(result.error.issues),
      /^reserved environment variables cannot be set: LD_PRELOAD, GPUSHARDS_X \(reserved: CUDA_DEVICE_MEMORY_LIMIT,.* names starting with LD_,/,
    );
    assert.ok(!userEnvSchema.safeParse({ OK: 'x', LD_LIBRARY_PATH: '/opt/lib' }).success);
  });

  test('the wire envSchema lets reserved keys through for the agent to strip', () => {
    assert.ok(envSchema.safeParse({ LD_PRELOAD: 'x' }).success);
  });
});

describe('environment syntax and size', () => {
  const message = (env: unknown) => {
    const result = envSchema.safeParse(env);
    assert.ok(!result.success, JSON.stringify(env));
    return formatIssues(result.error.issues);
  };

  test('names are POSIX-style', () => {
    for (const key of ['A', '_', 'a_b', 'X1', 'K'.repeat(256)]) {
      assert.ok(envSchema.safeParse({ [key]: '' }).success, key);
    }
    for (const key of ['', '1A', 'A-B', 'A=B', 'A B', 'É', 'K'.repeat(257)]) {
      assert.match(message({ [key]: 'v' }), /environment variable names must be/, key);
    }
  });

  test('values are strings without NUL', () => {
    assert.match(message({ A: 1 }), /A: .*expected string/);
    assert.match(message({ A: 'a\0' }), /cannot contain NUL/);
  });

  test('the number of entries and the total size are bounded', () => {
    const many = Object.fromEntries(
      Array.from({ length: MAX_ENV_ENTRIES + 1 }, (_, i) => [`K${i}`, '']),
    );
    assert.match(message(many), new RegExp(`at most ${MAX_ENV_ENTRIES} environment variables`));
    const justFits = { A: 'x'.repeat(MAX_ENV_BYTES - 2) }; // "A=" + value
    assert.ok(envSchema.safeParse(justFits).success);
    assert.match(message({ A: 'x'.repeat(MAX_ENV_BYTES - 1) }), /takes 32769 bytes/);
    // Multi-byte characters count as their UTF-8 size.
    assert.match(message({ A: 'é'.repeat(MAX_ENV_BYTES / 2) }), /more than the 32768 allowed/);
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_FAIR_SHARE_HALF_LIFE_MS } from '@gpushards/limits';
import { ConfigError } from '../config/control-plane-config.js';
import { queueOptionsFromEnv } from './queue-options.js';

describe('queueOptionsFromEnv', () => {
  it('defaults: a pass every 2 s, the library half-life, 30 s of grace; empty counts as unset', () => {
    const defaults = {
      sweepMs: 2000,
      halfLifeMs: DEFAULT_FAIR_SHARE_HALF_LIFE_MS,
      reclaimGraceSeconds: 30,
    };
    assert.deepEqual(queueOptionsFromEnv({}), defaults);
    assert.deepEqual(
      queueOptionsFromEnv({
        GPUSHARDS_QUEUE_SWEEP_MS: '',
        GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS: '',
        GPUSHARDS_RECLAIM_GRACE_SECONDS: '',
      }),
      defaults,
    );
  });

  it('reads each setting; a sweep of 0 (signals only) and a grace of 0 are allowed', () => {
    assert.deepEqual(
      queueOptionsFromEnv({
        GPUSHARDS_QUEUE_SWEEP_MS: '0',
        GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS: '1.5',
        GPUSHARDS_RECLAIM_GRACE_SECONDS: '0',
      }),
      { sweepMs: 0, halfLifeMs: 5_400_000, reclaimGraceSeconds: 0 },
    );
  });

  it('refuses a half-life of 0 and bad values, naming each as every setting is named', () => {
    assert.throws(
      () =>
        queueOptionsFromEnv({
          GPUSHARDS_QUEUE_SWEEP_MS: '-5',
          GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS: '0',
          GPUSHARDS_RECLAIM_GRACE_SECONDS: '601',
        }),
      (error: Error) =>
        error instanceof ConfigError &&
        error.message ===
          'invalid configuration:\n' +
            '  GPUSHARDS_QUEUE_SWEEP_MS must be a whole number of milliseconds from 0 (no backstop pass) to 3600000, got "-5"\n' +
            '  GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS must be a number of hours more than 0 and at most 87600, got "0"\n' +
            '  GPUSHARDS_RECLAIM_GRACE_SECONDS must be a whole number of seconds from 0 to 600, got "601"',
    );
    for (const [name, value] of [
      ['GPUSHARDS_QUEUE_SWEEP_MS', '2s'],
      ['GPUSHARDS_QUEUE_SWEEP_MS', '1.5'],
      ['GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS', 'week'],
      ['GPUSHARDS_FAIR_SHARE_HALF_LIFE_HOURS', '1e3'],
      ['GPUSHARDS_RECLAIM_GRACE_SECONDS', '10.5'],
    ] as const) {
      assert.throws(
        () => queueOptionsFromEnv({ [name]: value }),
        new RegExp(`${name} must be .*, got "${value}"`),
      );
    }
  });
});

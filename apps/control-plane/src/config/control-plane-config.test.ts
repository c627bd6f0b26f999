import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, loadConfigFromEnv } from './control-plane-config.js';

describe('loadConfigFromEnv', () => {
  it('defaults: 127.0.0.1:4000, embedded database in ./.gpushards', () => {
    const config = loadConfigFromEnv({}, '/srv');
    assert.equal(config.port, 4000);
    assert.equal(config.host, '127.0.0.1');
    assert.equal(config.dataDir, '/srv/.gpushards');
    assert.equal(config.database.url, undefined);
    assert.equal(config.database.embeddedDataDir, '/srv/.gpushards/database');
    assert.equal(config.logLevel, 'info');
  });

  it('GPUSHARDS_LOG_LEVEL: a pino level or silent, anything else refused by name', () => {
    assert.equal(loadConfigFromEnv({ GPUSHARDS_LOG_LEVEL: 'debug' }).logLevel, 'debug');
    assert.equal(loadConfigFromEnv({ GPUSHARDS_LOG_LEVEL: 'silent' }).logLevel, 'silent');
    assert.throws(
      () => loadConfigFromEnv({ GPUSHARDS_LOG_LEVEL: 'loud' }),
      (error: unknown) =>
        error instanceof ConfigError &&
        /GPUSHARDS_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "loud"/.test(
          error.message,
        ),
    );
  });

  it('reads every variable; empty ones count as unset', () => {
    const config = loadConfigFromEnv(
      {
        GPUSHARDS_PORT: '0',
        GPUSHARDS_HOST: '::',
        GPUSHARDS_DATA_DIR: 'state',
        DATABASE_URL: 'postgresql://cp@db:5432/gpushards',
      },
      '/srv',
    );
    assert.deepEqual(
      { port: config.port, host: config.host, dataDir: config.dataDir, url: config.database.url },
      { port: 0, host: '::', dataDir: '/srv/state', url: 'postgresql://cp@db:5432/gpushards' },
    );
    assert.equal(loadConfigFromEnv({ GPUSHARDS_PORT: '', DATABASE_URL: '' }).port, 4000);
  });

  it('names every bad variable at once and never echoes DATABASE_URL', () => {
    const secretUrl = 'mysql://root:hunter2@db/x';
    assert.throws(
      () =>
        loadConfigFromEnv({
          GPUSHARDS_PORT: '70000',
          GPUSHARDS_HOST: 'a b',
          DATABASE_URL: secretUrl,
        }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError);
        assert.match(
          error.message,
          /GPUSHARDS_PORT must be a whole number from 0 to 65535, got "70000"/,
        );
        assert.match(error.message, /GPUSHARDS_HOST must be an address or host name/);
        assert.match(error.message, /DATABASE_URL must be a postgresql:\/\/ URL/);
        assert.ok(!error.message.includes('hunter2'));
        return true;
      },
    );
    assert.throws(() => loadConfigFromEnv({ GPUSHARDS_PORT: 'http' }), /GPUSHARDS_PORT/);
  });

  it('GPUSHARDS_STUCK_SECONDS: per transitional state, the others keep their default; bad input named', () => {
    assert.equal(loadConfigFromEnv({}).stuckSeconds, undefined);
    assert.deepEqual(loadConfigFromEnv({ GPUSHARDS_STUCK_SECONDS: 'PLACED=30' }).stuckSeconds, {
      PENDING: 0,
      PLACED: 30,
      STARTING: 900,
      SUSPENDING: 600,
      RESUMING: 600,
      STOPPING: 660,
    });
    assert.throws(
      () => loadConfigFromEnv({ GPUSHARDS_STUCK_SECONDS: 'RUNNING=5' }),
      /GPUSHARDS_STUCK_SECONDS expected STATE=seconds/,
    );
  });

  it('GPUSHARDS_HOST_OFFLINE_SECONDS: default 60, whole seconds from 5 to 86400', () => {
    assert.equal(loadConfigFromEnv({}).hostOfflineSeconds, 60);
    assert.equal(
      loadConfigFromEnv({ GPUSHARDS_HOST_OFFLINE_SECONDS: '30' }).hostOfflineSeconds,
      30,
    );
    for (const bad of ['0', '4', '86401', '1.5', '-10', '1e3', 'soon']) {
      assert.throws(
        () => loadConfigFromEnv({ GPUSHARDS_HOST_OFFLINE_SECONDS: bad }),
        /GPUSHARDS_HOST_OFFLINE_SECONDS must be a whole number of seconds from 5 to 86400/,
        bad,
      );
    }
  });

  it('shard event retention: defaults 1000 per shard and 30 days, bad values refused by name', () => {
    assert.deepEqual(loadConfigFromEnv({}).shardEventRetention, {
      maxPerShard: 1000,
      maxAgeDays: 30,
    });
    assert.deepEqual(
      loadConfigFromEnv({
        GPUSHARDS_SHARD_EVENTS_PER_SHARD: '50',
        GPUSHARDS_SHARD_EVENT_RETENTION_DAYS: '7',
      }).shardEventRetention,
      { maxPerShard: 50, maxAgeDays: 7 },
    );
    for (const bad of ['0', '-1', '1.5', '2000000', 'many']) {
      assert.throws(
        () => loadConfigFromEnv({ GPUSHARDS_SHARD_EVENTS_PER_SHARD: bad }),
        (error: unknown) =>
          error instanceof ConfigError &&
          /GPUSHARDS_SHARD_EVENTS_PER_SHARD must be a whole number from 1 to 1000000/.test(
            error.message,
          ),
        bad,
      );
    }
    for (const bad of ['0', '3651', '2.5', 'forever']) {
      assert.throws(
        () => loadConfigFromEnv({ GPUSHARDS_SHARD_EVENT_RETENTION_DAYS: bad }),
        /GPUSHARDS_SHARD_EVENT_RETENTION_DAYS must be a whole number of days from 1 to 3650/,
        bad,
      );
    }
  });
});

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { readNatsAuth, type NatsAuthEnv } from './nats-auth.js';

const underEtc = (path: string) => `/etc/gpushards/${path}`;

function read(vars: NatsAuthEnv) {
  const problems: string[] = [];
  const auth = readNatsAuth(vars, underEtc, problems);
  return { auth, problems };
}

describe('readNatsAuth', () => {
  test('none set: anonymous, no problems', () => {
    assert.deepEqual(read({}), { auth: undefined, problems: [] });
  });

  test('a user and password together', () => {
    assert.deepEqual(read({ GPUSHARDS_NATS_USER: 'u', GPUSHARDS_NATS_PASSWORD: 'p' }), {
      auth: { kind: 'password', user: 'u', password: 'p' },
      problems: [],
    });
  });

  test('a user without a password (or the reverse) is a problem', () => {
    for (const vars of [{ GPUSHARDS_NATS_USER: 'u' }, { GPUSHARDS_NATS_PASSWORD: 'p' }]) {
      const { auth, problems } = read(vars);
      assert.equal(auth, undefined);
      assert.equal(problems.length, 1);
      assert.match(problems[0]!, /GPUSHARDS_NATS_USER and GPUSHARDS_NATS_PASSWORD go together/);
    }
  });

  test('nkey seed and creds files go through resolvePath', () => {
    assert.deepEqual(read({ GPUSHARDS_NATS_NKEY_SEED_FILE: 'agent.nk' }).auth, {
      kind: 'nkey',
      seedFile: '/etc/gpushards/agent.nk',
    });
    assert.deepEqual(read({ GPUSHARDS_NATS_CREDS: 'agent.creds' }).auth, {
      kind: 'creds',
      credsFile: '/etc/gpushards/agent.creds',
    });
  });

  test('more than one way is a problem', () => {
    const { problems } = read({
      GPUSHARDS_NATS_CREDS: '/a.creds',
      GPUSHARDS_NATS_NKEY_SEED_FILE: '/a.nk',
    });
    assert.equal(problems.length, 1);
    assert.match(problems[0]!, /set one way to authenticate to NATS/);
  });
});

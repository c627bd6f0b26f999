import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { nkeys } from '@nats-io/transport-node';

import {
  accountJwt,
  decodeNatsJwt,
  formatCreds,
  revokedAccountJwt,
  userJwt,
  type NatsAccountClaims,
} from './nats-jwt.js';

describe('NATS JWTs', () => {
  const signer = nkeys.createOperator();
  const account = nkeys.createAccount().getPublicKey();

  it('an account JWT decodes to what was signed, and a changed one is refused', async () => {
    const jwt = await accountJwt(account, 'gpushards', signer);
    const claims = decodeNatsJwt(jwt) as NatsAccountClaims;
    assert.equal(claims.sub, account);
    assert.equal(claims.iss, signer.getPublicKey());
    assert.equal(claims.nats.type, 'account');
    assert.equal(claims.nats.limits?.conn, -1, 'no limit on connections');
    // Claims that differ get JWTs whose jti differs (a hash of the claims).
    assert.notEqual(claims.jti, decodeNatsJwt(await accountJwt(account, 'other', signer)).jti);
    const [header, payload, signature] = jwt.split('.');
    const forged = Buffer.from(
      JSON.stringify({ ...claims, sub: nkeys.createAccount().getPublicKey() }),
    ).toString('base64url');
    assert.notEqual(forged, payload);
    assert.throws(() => decodeNatsJwt(`${header}.${forged}.${signature}`), /sig verification/);
  });

  it('revocations replace the earlier ones and keep every other claim', async () => {
    const user = nkeys.createUser().getPublicKey();
    const other = nkeys.createUser().getPublicKey();
    const issued = await accountJwt(account, 'gpushards', signer, { [other]: 1 });
    const revoked = decodeNatsJwt(
      await revokedAccountJwt(issued, signer, { [user]: 1700000000 }),
    ) as NatsAccountClaims;
    assert.deepEqual(revoked.nats.revocations, { [user]: 1700000000 });
    const { revocations: _r, ...rest } = revoked.nats;
    const { revocations: _i, ...before } = (decodeNatsJwt(issued) as NatsAccountClaims).nats;
    assert.deepEqual(rest, before);
    assert.equal(revoked.name, 'gpushards');
    assert.equal(revoked.iss, signer.getPublicKey());
  });

  it('a user JWT is signed by its account and carries its permissions; the .creds holds it and the seed', async () => {
    const accountKey = nkeys.createAccount();
    const user = nkeys.createUser();
    const jwt = await userJwt(user.getPublicKey(), 'agent-box-1', accountKey, {
      publish: { allow: ['gpushards.agent.box-1.>'] },
      subscribe: { allow: ['_INBOX.>'] },
      allow_responses: true,
    });
    const claims = decodeNatsJwt<Record<string, unknown>>(jwt);
    assert.equal(claims.iss, accountKey.getPublicKey());
    assert.equal(claims.sub, user.getPublicKey());
    assert.deepEqual(claims.nats.pub, { allow: ['gpushards.agent.box-1.>'] });
    assert.deepEqual(claims.nats.resp, { max: 1, ttl: 0 });
    const seed = new TextDecoder().decode(user.getSeed());
    const creds = formatCreds(jwt, seed);
    assert.ok(creds.includes(`\n${jwt}\n`));
    assert.ok(creds.includes(`\n${seed}\n`));
  });
});

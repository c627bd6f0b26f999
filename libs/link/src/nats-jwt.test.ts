import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { nkeys } from '@nats-io/transport-node';

import { accountJwt, decodeNatsJwt, revokedAccountJwt } from './nats-jwt.js';

describe('NATS JWTs', () => {
  const signer = nkeys.createOperator();
  const account = nkeys.createAccount().getPublicKey();

  it('an account JWT decodes to what was signed, and a changed one is refused', () => {
    const jwt = accountJwt(account, 'gpushards', signer);
    const claims = decodeNatsJwt(jwt);
    assert.equal(claims.sub, account);
    assert.equal(claims.iss, signer.getPublicKey());
    assert.equal(claims.nats.type, 'account');
    assert.match(claims.jti, /^[A-Z2-7]{52}$/);
    const [header, payload, signature] = jwt.split('.');
    const forged = Buffer.from(
      JSON.stringify({ ...claims, sub: nkeys.createAccount().getPublicKey() }),
    ).toString('base64url');
    assert.notEqual(forged, payload);
    assert.throws(
      () => decodeNatsJwt(`${header}.${forged}.${signature}`),
      /not signed by its issuer/,
    );
  });

  it('revocations replace the earlier ones and keep every other claim', () => {
    const user = nkeys.createUser().getPublicKey();
    const other = nkeys.createUser().getPublicKey();
    const issued = accountJwt(account, 'gpushards', signer, { [other]: 1 });
    const revoked = decodeNatsJwt(revokedAccountJwt(issued, signer, { [user]: 1700000000 }));
    assert.deepEqual(revoked.nats.revocations, { [user]: 1700000000 });
    const { revocations: _r, ...rest } = revoked.nats;
    const { revocations: _i, ...before } = decodeNatsJwt(issued).nats;
    assert.deepEqual(rest, before);
    assert.equal(revoked.name, 'gpushards');
  });
});

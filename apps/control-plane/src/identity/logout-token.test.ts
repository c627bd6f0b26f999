import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BACKCHANNEL_LOGOUT_EVENT, logoutTokenProblem } from './oidc-client.js';

/** The claims a logout token must carry once its signature checks (Back-Channel Logout 1.0, 2.4). */
describe('logout token claims', () => {
  const valid = {
    iss: 'https://id.example.com',
    aud: 'gpushards',
    iat: 1_800_000_000,
    jti: 'a-unique-id',
    sid: 'provider-session',
    events: { [BACKCHANNEL_LOGOUT_EVENT]: {} },
  };

  it('a sid or a sub, an iat, a jti and the event: a logout token', () => {
    assert.equal(logoutTokenProblem(valid), undefined);
    const { sid: _sid, ...bySubject } = valid;
    assert.equal(logoutTokenProblem({ ...bySubject, sub: 'alice' }), undefined);
  });

  it('refuses each missing or forbidden claim, saying which', () => {
    const { sid: _sid, ...noOne } = valid;
    const { jti: _jti, ...noJti } = valid;
    const { iat: _iat, ...noIat } = valid;
    const cases: [Record<string, unknown>, RegExp][] = [
      [noOne, /neither a sub nor a sid/],
      [noJti, /no jti/],
      [noIat, /no iat/],
      [{ ...valid, nonce: 'n' }, /nonce/],
      [{ ...valid, events: {} }, /no back-channel logout event/],
      [{ ...valid, events: { [BACKCHANNEL_LOGOUT_EVENT]: 'yes' } }, /no back-channel logout event/],
      [{ ...valid, sid: 42 }, /neither a sub nor a sid/],
    ];
    for (const [claims, problem] of cases) {
      assert.match(logoutTokenProblem(claims) ?? 'none', problem, JSON.stringify(claims));
    }
  });
});

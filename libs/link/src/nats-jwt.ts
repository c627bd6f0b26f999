import {
  decode,
  encodeAccount,
  encodeOperator,
  encodeUser,
  fmtCreds,
  type Account,
  type ClaimsData,
  type User,
} from '@nats-io/jwt';
import { nkeys } from '@nats-io/transport-node';

/**
 * NATS decentralised authentication (operator → account → user JWTs, signed with nkeys), as
 * much of it as GPU Shards uses, through nats-io's own @nats-io/jwt:
 * deploy/nats/generate-config.mjs --auth jwt writes an operator, a system account, the
 * gpushards account and one user per agent host; the control plane re-signs the gpushards
 * account with revocations when a host is removed (removeHost) and pushes it to the servers'
 * resolver. Nothing here is trusted by the server unless the chain of signatures from its
 * configured operator holds.
 */

export type NatsKeyPair = ReturnType<typeof nkeys.createUser>;
export type NatsAccountClaims = ClaimsData<Account>;

/** nats-io/jwt's NoLimit. */
const NO_LIMIT = -1;

/** The claims of a NATS JWT whose signature its issuer made; throws otherwise. */
export function decodeNatsJwt<T = unknown>(jwt: string): ClaimsData<T> {
  return decode<T>(jwt.trim());
}

/** The operator: the root of trust nats-server is configured with; its signing key signs accounts. */
export function operatorJwt(
  operator: NatsKeyPair,
  signingKey: NatsKeyPair,
  systemAccount: string,
): Promise<string> {
  return encodeOperator('gpushards', operator, {
    signing_keys: [signingKey.getPublicKey()],
    system_account: systemAccount,
  });
}

/**
 * An account without limits (a zero limit would refuse every connection), signed by `signer`
 * (an operator signing key); `revocations` maps a user's public key to the second before
 * which its JWTs are refused.
 */
export function accountJwt(
  account: string,
  name: string,
  signer: NatsKeyPair,
  revocations: Readonly<Record<string, number>> = {},
): Promise<string> {
  return encodeAccount(name, account, withRevocations(unlimitedAccount(), revocations), {
    signer,
  });
}

function unlimitedAccount(): Partial<Account> {
  return {
    limits: {
      subs: NO_LIMIT,
      data: NO_LIMIT,
      payload: NO_LIMIT,
      imports: NO_LIMIT,
      exports: NO_LIMIT,
      wildcards: true,
      conn: NO_LIMIT,
      leaf: NO_LIMIT,
    },
    default_permissions: { pub: {}, sub: {} },
  };
}

function withRevocations(
  account: Partial<Account>,
  revocations: Readonly<Record<string, number>>,
): Partial<Account> {
  return Object.keys(revocations).length > 0
    ? { ...account, revocations: { ...revocations } }
    : account;
}

export interface NatsUserPermissions {
  readonly publish?: { readonly allow?: readonly string[] };
  readonly subscribe?: { readonly allow?: readonly string[] };
  readonly allow_responses?: boolean;
}

/** A user of `account` (signed by the account's key) with the given permissions. */
export function userJwt(
  user: string,
  name: string,
  account: NatsKeyPair,
  permissions?: NatsUserPermissions,
): Promise<string> {
  const claims: Partial<User> = {
    ...(permissions?.publish?.allow ? { pub: { allow: [...permissions.publish.allow] } } : {}),
    ...(permissions?.subscribe?.allow ? { sub: { allow: [...permissions.subscribe.allow] } } : {}),
    // One reply per request, the server's default time to answer.
    ...(permissions?.allow_responses ? { resp: { max: 1, ttl: 0 } } : {}),
  };
  return encodeUser(name, user, account, claims);
}

/** A .creds file (what nats.js credsAuthenticator and the nats CLI read). */
export function formatCreds(jwt: string, seed: string): string {
  return new TextDecoder().decode(fmtCreds(jwt, nkeys.fromSeed(new TextEncoder().encode(seed))));
}

/**
 * The gpushards account as first issued, re-signed with `signer` (an operator signing key)
 * and the revocations given, newer than any earlier issue (iat now: the servers' resolver keeps
 * only a newer JWT; two in one second with other revocations differ by jti, a hash of the claims).
 */
export function revokedAccountJwt(
  issued: string,
  signer: NatsKeyPair,
  revocations: Readonly<Record<string, number>>,
): Promise<string> {
  const claims = decodeNatsJwt<Account>(issued);
  if (claims.nats.type !== 'account') throw new Error(`${claims.sub} is not an account JWT`);
  const { revocations: _earlier, type: _type, version: _version, ...account } = claims.nats;
  return encodeAccount(claims.name, claims.sub, withRevocations(account, revocations), {
    signer,
  });
}

import { createHash } from 'node:crypto';

import { nkeys } from '@nats-io/transport-node';

/**
 * NATS decentralised authentication (operator → account → user JWTs, signed with nkeys), as
 * much of it as GPU Shards uses: deploy/nats/generate-config.mjs --auth jwt writes an operator,
 * a system account, the gpushards account and one user per agent host; the control plane
 * re-signs the gpushards account with revocations when a host is removed (removeHost) and
 * pushes it to the servers' resolver. The encoding is nats-io/jwt v2's: header
 * {"typ":"JWT","alg":"ed25519-nkey"}, claims with `jti` (base32 of the claims' SHA-512/256),
 * `iat`, `iss`, `sub`, `name` and a `nats` object; the signature is the issuer's nkey over
 * "header.claims", all base64url. Nothing here is trusted by the server unless the chain of
 * signatures from its configured operator holds.
 */

export type NatsKeyPair = ReturnType<typeof nkeys.createUser>;

const HEADER = { typ: 'JWT', alg: 'ed25519-nkey' } as const;
/** nats-io/jwt's NoLimit. */
const NO_LIMIT = -1;

export interface NatsJwtClaims {
  readonly jti: string;
  readonly iat: number;
  readonly iss: string;
  readonly sub: string;
  readonly name: string;
  readonly nats: Record<string, unknown> & { readonly type: string; readonly version: 2 };
}

const base64url = (data: Uint8Array | string) => Buffer.from(data).toString('base64url');

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
function base32(data: Uint8Array): string {
  let bits = 0;
  let value = 0;
  let out = '';
  for (const byte of data) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32[(value << (5 - bits)) & 31];
  return out;
}

/** Signs `claims` (jti and iss filled in here) with `signer`; `iat` in seconds, default now. */
export function encodeNatsJwt(
  claims: Omit<NatsJwtClaims, 'jti' | 'iss' | 'iat'> & { readonly iat?: number },
  signer: NatsKeyPair,
): string {
  const body = {
    iat: claims.iat ?? Math.floor(Date.now() / 1000),
    iss: signer.getPublicKey(),
    name: claims.name,
    sub: claims.sub,
    nats: claims.nats,
  };
  const jti = base32(createHash('sha512-256').update(JSON.stringify(body)).digest());
  const signed = `${base64url(JSON.stringify(HEADER))}.${base64url(JSON.stringify({ jti, ...body }))}`;
  const signature = signer.sign(new TextEncoder().encode(signed));
  return `${signed}.${base64url(signature)}`;
}

/** The claims of a NATS JWT whose signature its issuer made; throws otherwise. */
export function decodeNatsJwt(jwt: string): NatsJwtClaims {
  const parts = jwt.trim().split('.');
  if (parts.length !== 3) throw new Error('not a JWT: expected three dot-separated parts');
  const [header, payload, signature] = parts as [string, string, string];
  const head = JSON.parse(Buffer.from(header, 'base64url').toString('utf8')) as { alg?: string };
  if (head.alg !== HEADER.alg) throw new Error(`not a NATS JWT: alg ${String(head.alg)}`);
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as NatsJwtClaims;
  const issuer = nkeys.fromPublic(claims.iss);
  if (
    !issuer.verify(
      new TextEncoder().encode(`${header}.${payload}`),
      Buffer.from(signature, 'base64url'),
    )
  ) {
    throw new Error(`the JWT of ${claims.sub} is not signed by its issuer ${claims.iss}`);
  }
  return claims;
}

/** The operator: the root of trust nats-server is configured with; its signing key signs accounts. */
export function operatorJwt(
  operator: NatsKeyPair,
  signingKey: NatsKeyPair,
  systemAccount: string,
): string {
  return encodeNatsJwt(
    {
      name: 'gpushards',
      sub: operator.getPublicKey(),
      nats: {
        signing_keys: [signingKey.getPublicKey()],
        system_account: systemAccount,
        type: 'operator',
        version: 2,
      },
    },
    operator,
  );
}

/** An account without limits (a zero limit would refuse every connection); `revocations` maps a user's public key to the time before which its JWTs are refused. */
export function accountJwt(
  account: string,
  name: string,
  signer: NatsKeyPair,
  revocations: Readonly<Record<string, number>> = {},
): string {
  return encodeNatsJwt(
    {
      name,
      sub: account,
      nats: {
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
        ...(Object.keys(revocations).length > 0 ? { revocations: { ...revocations } } : {}),
        type: 'account',
        version: 2,
      },
    },
    signer,
  );
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
): string {
  return encodeNatsJwt(
    {
      name,
      sub: user,
      nats: {
        ...(permissions?.publish?.allow ? { pub: { allow: [...permissions.publish.allow] } } : {}),
        ...(permissions?.subscribe?.allow
          ? { sub: { allow: [...permissions.subscribe.allow] } }
          : {}),
        // One reply per request, the server's default time to answer.
        ...(permissions?.allow_responses ? { resp: { max: 1, ttl: 0 } } : {}),
        subs: NO_LIMIT,
        data: NO_LIMIT,
        payload: NO_LIMIT,
        type: 'user',
        version: 2,
      },
    },
    account,
  );
}

/** A .creds file (what nats.js credsAuthenticator and the nats CLI read). */
export function formatCreds(jwt: string, seed: string): string {
  return (
    '-----BEGIN NATS USER JWT-----\n' +
    `${jwt}\n` +
    '------END NATS USER JWT------\n\n' +
    '************************* IMPORTANT *************************\n' +
    'NKEY Seed printed below can be used to sign and prove identity.\n' +
    'NKEYs are sensitive and should be treated as secrets.\n\n' +
    '-----BEGIN USER NKEY SEED-----\n' +
    `${seed}\n` +
    '------END USER NKEY SEED------\n\n' +
    '*************************************************************\n'
  );
}

/**
 * The gpushards account as first issued, re-signed with `signer` (an operator signing key)
 * and the revocations given, newer than any earlier issue (iat now: the servers' resolver keeps
 * only a newer JWT; two in one second differ by jti).
 */
export function revokedAccountJwt(
  issued: string,
  signer: NatsKeyPair,
  revocations: Readonly<Record<string, number>>,
): string {
  const claims = decodeNatsJwt(issued);
  if (claims.nats.type !== 'account') throw new Error(`${claims.sub} is not an account JWT`);
  const { revocations: _earlier, ...nats } = claims.nats;
  return encodeNatsJwt(
    {
      name: claims.name,
      sub: claims.sub,
      nats: { ...nats, ...(Object.keys(revocations).length > 0 ? { revocations } : {}) },
    },
    signer,
  );
}

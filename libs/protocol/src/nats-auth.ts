/**
 * How an agent or the control plane logs in to NATS (deploy/nats/generate-config.mjs writes
 * each), and the GPUSHARDS_NATS_* variables that choose it. Turning a NatsAuth into a nats.js
 * authenticator stays in each app: this library does not depend on NATS.
 */
export type NatsAuth =
  | { readonly kind: 'password'; readonly user: string; readonly password: string }
  | { readonly kind: 'nkey'; readonly seedFile: string }
  | { readonly kind: 'creds'; readonly credsFile: string };

/** The variables readNatsAuth reads; each app validates them with its own schema first. */
export interface NatsAuthEnv {
  readonly GPUSHARDS_NATS_USER?: string | undefined;
  readonly GPUSHARDS_NATS_PASSWORD?: string | undefined;
  readonly GPUSHARDS_NATS_NKEY_SEED_FILE?: string | undefined;
  readonly GPUSHARDS_NATS_CREDS?: string | undefined;
}

/**
 * The one way to authenticate that `vars` set: GPUSHARDS_NATS_USER and _PASSWORD together,
 * GPUSHARDS_NATS_NKEY_SEED_FILE or GPUSHARDS_NATS_CREDS (files made absolute by
 * `resolvePath`); undefined when none is set. Appends what is wrong to `problems`.
 */
export function readNatsAuth(
  vars: NatsAuthEnv,
  resolvePath: (path: string) => string,
  problems: string[],
): NatsAuth | undefined {
  const ways: NatsAuth[] = [];
  if (vars.GPUSHARDS_NATS_USER !== undefined || vars.GPUSHARDS_NATS_PASSWORD !== undefined) {
    if (vars.GPUSHARDS_NATS_USER === undefined || vars.GPUSHARDS_NATS_PASSWORD === undefined) {
      problems.push(
        'GPUSHARDS_NATS_USER and GPUSHARDS_NATS_PASSWORD go together: set both or neither',
      );
    } else {
      ways.push({
        kind: 'password',
        user: vars.GPUSHARDS_NATS_USER,
        password: vars.GPUSHARDS_NATS_PASSWORD,
      });
    }
  }
  if (vars.GPUSHARDS_NATS_NKEY_SEED_FILE !== undefined) {
    ways.push({ kind: 'nkey', seedFile: resolvePath(vars.GPUSHARDS_NATS_NKEY_SEED_FILE) });
  }
  if (vars.GPUSHARDS_NATS_CREDS !== undefined) {
    ways.push({ kind: 'creds', credsFile: resolvePath(vars.GPUSHARDS_NATS_CREDS) });
  }
  if (ways.length > 1) {
    problems.push(
      'set one way to authenticate to NATS: GPUSHARDS_NATS_USER/PASSWORD, GPUSHARDS_NATS_NKEY_SEED_FILE or GPUSHARDS_NATS_CREDS',
    );
  }
  return ways[0];
}

import { z } from 'zod';

/** Sign-in through OpenID Connect (docs/identity.md); absent: API tokens only. */
export interface IdentityConfig {
  /** The provider's issuer URL; its /.well-known/openid-configuration is read at start. */
  readonly issuer: URL;
  readonly clientId: string;
  readonly clientSecret: string;
  /**
   * Where people reach the control plane (the portal's origin): the redirect URI is
   * `<publicUrl>/auth/oidc/callback`, and a WebSocket signed in by cookie must come from it.
   */
  readonly publicUrl: URL;
  /** The ID token claim that lists the person's groups. */
  readonly groupsClaim: string;
  /** Scopes asked for besides `openid`. */
  readonly scopes: readonly string[];
  /** A session ends this long after sign-in, whatever happens. */
  readonly sessionSeconds: number;
  /**
   * How often a session is checked with the provider (a refresh-token grant): a refresh the
   * provider refuses (the person signed out there, was disabled, the grant revoked) ends it.
   */
  readonly recheckSeconds: number;
}

export const DEFAULT_SESSION_SECONDS = 8 * 3600;
export const DEFAULT_RECHECK_SECONDS = 300;
export const DEFAULT_GROUPS_CLAIM = 'groups';

function seconds(min: number, max: number) {
  const rule = `must be a whole number of seconds from ${min} to ${max}`;
  return z
    .string()
    .regex(/^\d{1,7}$/, rule)
    .transform(Number)
    .refine((value) => value >= min && value <= max, rule);
}

/** An http(s) URL without query or fragment; http only for this machine (a test provider). */
function baseUrl(what: string) {
  return z.string().transform((text, context) => {
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      context.addIssue({ code: 'custom', message: `must be ${what}, like https://id.example.com` });
      return z.NEVER;
    }
    const local = ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname);
    if (url.protocol !== 'https:' && !(url.protocol === 'http:' && local)) {
      context.addIssue({
        code: 'custom',
        message: 'must be an https:// URL (http:// only for localhost or 127.0.0.1)',
      });
      return z.NEVER;
    }
    if (url.search !== '' || url.hash !== '') {
      context.addIssue({ code: 'custom', message: 'must have no ?query or #fragment' });
      return z.NEVER;
    }
    return url;
  });
}

/** The GPUSHARDS_OIDC_* variables: part of the control plane's env schema. */
export const identityEnvShape = {
  GPUSHARDS_OIDC_ISSUER: baseUrl("the provider's issuer URL").optional(),
  GPUSHARDS_OIDC_CLIENT_ID: z
    .string()
    .regex(/^[\x21-\x7e]{1,256}$/, 'must be 1 to 256 printable ASCII characters')
    .optional(),
  GPUSHARDS_OIDC_CLIENT_SECRET: z
    .string()
    .regex(/^[\x20-\x7e]{1,512}$/, 'must be 1 to 512 printable ASCII characters')
    .optional(),
  GPUSHARDS_PUBLIC_URL: baseUrl('the URL people open the portal at').optional(),
  GPUSHARDS_OIDC_GROUPS_CLAIM: z
    .string()
    .regex(/^[A-Za-z0-9_:/.-]{1,128}$/, 'must be a claim name like groups or roles')
    .default(DEFAULT_GROUPS_CLAIM),
  GPUSHARDS_OIDC_SCOPES: z
    .string()
    .regex(/^[\x21-\x7e]+( [\x21-\x7e]+)*$/, 'must be scopes separated by single spaces')
    .transform((text) => text.split(' ').filter((scope) => scope !== 'openid'))
    .default(['email', 'profile', 'groups', 'offline_access']),
  GPUSHARDS_SESSION_SECONDS: seconds(60, 30 * 86_400).default(DEFAULT_SESSION_SECONDS),
  GPUSHARDS_OIDC_RECHECK_SECONDS: seconds(1, 86_400).default(DEFAULT_RECHECK_SECONDS),
};

type IdentityEnv = z.infer<z.ZodObject<typeof identityEnvShape>>;

/**
 * The sign-in configuration the variables say: undefined when none of issuer, client id and
 * secret is set; the problems (appended) when only some are, or the public URL is missing.
 */
export function identityConfigOf(
  env: IdentityEnv,
  defaultPublicUrl: string,
  problems: string[],
): IdentityConfig | undefined {
  const parts = {
    GPUSHARDS_OIDC_ISSUER: env.GPUSHARDS_OIDC_ISSUER,
    GPUSHARDS_OIDC_CLIENT_ID: env.GPUSHARDS_OIDC_CLIENT_ID,
    GPUSHARDS_OIDC_CLIENT_SECRET: env.GPUSHARDS_OIDC_CLIENT_SECRET,
  };
  const missing = Object.entries(parts).filter(([, value]) => value === undefined);
  if (missing.length === 3) return undefined;
  if (missing.length > 0) {
    problems.push(
      `${missing.map(([name]) => name).join(' and ')}: sign-in through OpenID Connect needs GPUSHARDS_OIDC_ISSUER, GPUSHARDS_OIDC_CLIENT_ID and GPUSHARDS_OIDC_CLIENT_SECRET together (or none of them)`,
    );
    return undefined;
  }
  if (env.GPUSHARDS_OIDC_RECHECK_SECONDS > env.GPUSHARDS_SESSION_SECONDS) {
    problems.push(
      `GPUSHARDS_OIDC_RECHECK_SECONDS: must be at most GPUSHARDS_SESSION_SECONDS (${env.GPUSHARDS_SESSION_SECONDS})`,
    );
    return undefined;
  }
  return {
    issuer: env.GPUSHARDS_OIDC_ISSUER!,
    clientId: env.GPUSHARDS_OIDC_CLIENT_ID!,
    clientSecret: env.GPUSHARDS_OIDC_CLIENT_SECRET!,
    publicUrl: env.GPUSHARDS_PUBLIC_URL ?? new URL(defaultPublicUrl),
    groupsClaim: env.GPUSHARDS_OIDC_GROUPS_CLAIM,
    scopes: env.GPUSHARDS_OIDC_SCOPES,
    sessionSeconds: env.GPUSHARDS_SESSION_SECONDS,
    recheckSeconds: env.GPUSHARDS_OIDC_RECHECK_SECONDS,
  };
}

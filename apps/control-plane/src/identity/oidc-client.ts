import * as oidc from 'openid-client';
import type { IdentityConfig } from '../config/identity-env.js';

/** What a sign-in must remember between the redirect to the provider and its answer. */
export interface SignInFlow {
  readonly state: string;
  readonly nonce: string;
  readonly verifier: string;
  /** The team the person asked to act as (the portal's choice), if any. */
  readonly team?: string;
}

/** What the provider said about the person at sign-in. */
export interface SignedIn {
  readonly subject: string;
  readonly email: string | null;
  readonly name: string | null;
  readonly groups: readonly string[];
  readonly refreshToken: string | null;
  readonly idToken: string | null;
}

/** The callback path, under the public URL: the redirect URI registered with the provider. */
export const CALLBACK_PATH = '/auth/oidc/callback';

/**
 * The control plane as an OpenID Connect relying party (openid-client): the authorization code
 * flow with PKCE (S256), state and nonce; refresh-token grants to recheck a session; the
 * provider's end-session URL for sign-out. The provider's metadata is discovered on first use
 * (and again after a failure), so a provider that is down at start only delays sign-in.
 */
export class OidcClient {
  private configuration: Promise<oidc.Configuration> | undefined;

  constructor(private readonly config: IdentityConfig) {}

  get redirectUri(): string {
    return new URL(CALLBACK_PATH, this.config.publicUrl).href;
  }

  /** The provider's authorization URL for a new sign-in, and what to remember for its answer. */
  async start(team?: string): Promise<{ url: URL; flow: SignInFlow }> {
    const configuration = await this.discover();
    const verifier = oidc.randomPKCECodeVerifier();
    const flow: SignInFlow = {
      state: oidc.randomState(),
      nonce: oidc.randomNonce(),
      verifier,
      ...(team === undefined ? {} : { team }),
    };
    const url = oidc.buildAuthorizationUrl(configuration, {
      redirect_uri: this.redirectUri,
      scope: ['openid', ...this.config.scopes].join(' '),
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      state: flow.state,
      nonce: flow.nonce,
      // A refresh token rechecks the session; some providers give one only when asked so.
      ...(this.config.scopes.includes('offline_access') ? { prompt: 'consent' } : {}),
    });
    return { url, flow };
  }

  /**
   * Redeems the provider's answer (the callback URL with its code and state) for tokens,
   * checking state, nonce, PKCE and the ID token; throws what the provider or the check said.
   */
  async finish(callback: URL, flow: SignInFlow): Promise<SignedIn> {
    const configuration = await this.discover();
    const tokens = await oidc.authorizationCodeGrant(configuration, callback, {
      pkceCodeVerifier: flow.verifier,
      expectedState: flow.state,
      expectedNonce: flow.nonce,
      idTokenExpected: true,
    });
    const claims = tokens.claims();
    if (claims === undefined) throw new Error('the provider sent no ID token');
    const groups = claims[this.config.groupsClaim];
    return {
      subject: claims.sub,
      email: typeof claims['email'] === 'string' ? claims['email'] : null,
      name: typeof claims['name'] === 'string' ? claims['name'] : null,
      groups: Array.isArray(groups) ? groups.filter((g): g is string => typeof g === 'string') : [],
      refreshToken: tokens.refresh_token ?? null,
      idToken: tokens.id_token ?? null,
    };
  }

  /** A refresh-token grant: the new refresh token (or the old one); throws when refused. */
  async refresh(refreshToken: string): Promise<string> {
    const tokens = await oidc.refreshTokenGrant(await this.discover(), refreshToken);
    return tokens.refresh_token ?? refreshToken;
  }

  /** Where to send the browser to sign out at the provider too; undefined if it has no such URL. */
  async endSessionUrl(idToken: string | null, returnTo: string): Promise<string | undefined> {
    const configuration = await this.discover();
    if (configuration.serverMetadata().end_session_endpoint === undefined) return undefined;
    return oidc.buildEndSessionUrl(configuration, {
      post_logout_redirect_uri: returnTo,
      ...(idToken === null ? {} : { id_token_hint: idToken }),
    }).href;
  }

  private discover(): Promise<oidc.Configuration> {
    this.configuration ??= oidc
      .discovery(
        this.config.issuer,
        this.config.clientId,
        undefined,
        oidc.ClientSecretBasic(this.config.clientSecret),
        // http:// is accepted for a provider on this machine only (identity-env.ts).
        this.config.issuer.protocol === 'http:' ? { execute: [oidc.allowInsecureRequests] } : {},
      )
      .catch((error: unknown) => {
        this.configuration = undefined;
        throw error;
      });
    return this.configuration;
  }
}

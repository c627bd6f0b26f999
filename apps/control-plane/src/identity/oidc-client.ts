import { createRemoteJWKSet, jwtVerify, type JWTPayload } from 'jose';
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
  /** The provider's session id (`sid`), which a back-channel logout may name. */
  readonly providerSessionId: string | null;
}

/** Where the provider posts logout tokens: the back-channel logout URI to register. */
export const BACKCHANNEL_LOGOUT_PATH = '/auth/oidc/backchannel-logout';

/** The event a logout token carries (OpenID Connect Back-Channel Logout 1.0, 2.4). */
export const BACKCHANNEL_LOGOUT_EVENT = 'http://schemas.openid.net/event/backchannel-logout';

/** How old a logout token may be: its replay later could end a newer session of the person. */
const LOGOUT_TOKEN_MAX_AGE = '5 minutes';

/** What a verified logout token asks to end: the provider's session, or all of a person's. */
export interface ProviderLogout {
  readonly subject: string | null;
  readonly providerSessionId: string | null;
}

/** A device authorization the provider started for a person's CLI. */
export interface DeviceStart {
  readonly deviceCode: string;
  readonly userCode: string;
  readonly verificationUri: string;
  readonly verificationUriComplete: string | null;
  readonly expiresIn: number;
  readonly interval: number;
}

/** The provider refused a device grant for good (expired_token, access_denied, …). */
export class DeviceGrantError extends Error {
  override name = 'DeviceGrantError';
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** A logout token that is not one, or not from the provider for this client. */
export class LogoutTokenError extends Error {
  override name = 'LogoutTokenError';
}

/**
 * What a logout token's claims lack once its signature, issuer, audience and age are checked
 * (Back-Channel Logout 1.0, 2.4 and 2.6): an iat and a jti, the back-channel logout event, a
 * sub or a sid, and no nonce (an ID token is not a logout token). Undefined when it is one.
 */
export function logoutTokenProblem(payload: JWTPayload): string | undefined {
  if (typeof payload.iat !== 'number') return 'it has no iat';
  if (typeof payload.jti !== 'string') return 'it has no jti';
  const events = payload['events'];
  const event =
    typeof events === 'object' && events !== null
      ? (events as Record<string, unknown>)[BACKCHANNEL_LOGOUT_EVENT]
      : undefined;
  if (typeof event !== 'object' || event === null) return 'it carries no back-channel logout event';
  if ('nonce' in payload) return 'it has a nonce (an ID token, not a logout token)';
  if (typeof payload.sub !== 'string' && typeof payload['sid'] !== 'string')
    return 'it names neither a sub nor a sid';
  return undefined;
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
  private keys: ReturnType<typeof createRemoteJWKSet> | undefined;

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
    return this.signedInOf(tokens);
  }

  /**
   * Starts an OAuth 2.0 Device Authorization Grant for a person's CLI: the provider's user code
   * and where to enter it. The client registered for the control plane must be allowed the
   * device_code grant.
   */
  async startDevice(): Promise<DeviceStart> {
    const answer = await oidc.initiateDeviceAuthorization(await this.discover(), {
      scope: ['openid', ...this.config.scopes].join(' '),
    });
    return {
      deviceCode: answer.device_code,
      userCode: answer.user_code,
      verificationUri: answer.verification_uri,
      verificationUriComplete: answer.verification_uri_complete ?? null,
      expiresIn: answer.expires_in,
      interval: answer.interval ?? 5,
    };
  }

  /**
   * One token request for a device code: what the person said at the provider, or `pending`
   * (not yet, or `slow_down`: the CLI then waits longer). Throws the provider's refusal
   * (expired_token, access_denied) as DeviceGrantError.
   */
  async pollDevice(deviceCode: string): Promise<SignedIn | 'pending' | 'slow_down'> {
    try {
      const tokens = await oidc.genericGrantRequest(
        await this.discover(),
        'urn:ietf:params:oauth:grant-type:device_code',
        { device_code: deviceCode },
      );
      return this.signedInOf(tokens);
    } catch (error) {
      const code = (error as { error?: unknown }).error;
      if (code === 'authorization_pending') return 'pending';
      if (code === 'slow_down') return 'slow_down';
      if (typeof code === 'string') {
        const description = (error as { error_description?: unknown }).error_description;
        throw new DeviceGrantError(code, typeof description === 'string' ? description : code);
      }
      throw error;
    }
  }

  private signedInOf(tokens: oidc.TokenEndpointResponse & oidc.TokenEndpointResponseHelpers) {
    const claims = tokens.claims();
    if (claims === undefined) throw new Error('the provider sent no ID token');
    const groups = claims[this.config.groupsClaim];
    const signedIn: SignedIn = {
      subject: claims.sub,
      email: typeof claims['email'] === 'string' ? claims['email'] : null,
      name: typeof claims['name'] === 'string' ? claims['name'] : null,
      groups: Array.isArray(groups) ? groups.filter((g): g is string => typeof g === 'string') : [],
      refreshToken: tokens.refresh_token ?? null,
      idToken: tokens.id_token ?? null,
      providerSessionId: typeof claims['sid'] === 'string' ? claims['sid'] : null,
    };
    return signedIn;
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

  /**
   * Checks a logout token the provider posted: signed with one of the provider's published keys
   * (its jwks_uri, fetched and cached by jose, again for an unknown key id), from its issuer,
   * for this client, at most five minutes old, with the claims logoutTokenProblem requires.
   * Throws LogoutTokenError saying what is wrong.
   */
  async verifyLogoutToken(token: string): Promise<ProviderLogout> {
    const metadata = (await this.discover()).serverMetadata();
    if (metadata.jwks_uri === undefined) {
      throw new LogoutTokenError('the provider publishes no keys (no jwks_uri)');
    }
    this.keys ??= createRemoteJWKSet(new URL(metadata.jwks_uri));
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, this.keys, {
        issuer: metadata.issuer,
        audience: this.config.clientId,
        maxTokenAge: LOGOUT_TOKEN_MAX_AGE,
        clockTolerance: 30,
      }));
    } catch (error) {
      throw new LogoutTokenError(`the logout token does not verify: ${(error as Error).message}`, {
        cause: error,
      });
    }
    const problem = logoutTokenProblem(payload);
    if (problem !== undefined) throw new LogoutTokenError(`not a logout token: ${problem}`);
    return {
      subject: payload.sub ?? null,
      providerSessionId: typeof payload['sid'] === 'string' ? payload['sid'] : null,
    };
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

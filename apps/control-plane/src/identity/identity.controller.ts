import { Controller, Get, Inject, NotFoundException, Post, Query, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Public } from '../auth/decorators.js';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import type { IdentityConfig } from '../config/identity-env.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { openSealed, SecretBox } from '../secrets/secret-box.js';
import {
  BACKCHANNEL_LOGOUT_PATH,
  LogoutTokenError,
  OidcClient,
  type ProviderLogout,
  type SignInFlow,
} from './oidc-client.js';
import { IdentityMetrics } from './identity-metrics.js';
import {
  clearCookie,
  FLOW_COOKIE,
  FLOW_SECONDS,
  parseCookies,
  SESSION_COOKIE,
  setCookie,
} from './session-cookie.js';
import { IdentityRuntime } from './identity-runtime.js';
import { NoAccessError, SessionsService } from './sessions.service.js';

const FLOW_PATH = '/auth/oidc';

/**
 * Sign-in through OpenID Connect, for the portal: where to start, the provider's answer, and
 * sign-out. Public routes (nothing to authenticate yet); without GPUSHARDS_OIDC_* they answer
 * 404, and /auth/config says so to the portal.
 */
@Public()
@Controller()
export class IdentityController {
  private readonly logger: Logger;
  private readonly identity: IdentityConfig | undefined;

  constructor(
    @Inject(CONTROL_PLANE_CONFIG) config: ControlPlaneConfig,
    private readonly runtime: IdentityRuntime,
    private readonly sessions: SessionsService,
    private readonly secrets: SecretBox,
    private readonly metrics: IdentityMetrics,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.identity = config.identity;
    this.logger = logger.child({ module: 'identity' });
  }

  /** Whether the portal offers "Sign in with your organisation" (no secrets here). */
  @Get('/auth/config')
  authConfig(): { oidc: boolean; issuer: string | null } {
    return { oidc: this.identity !== undefined, issuer: this.identity?.issuer.href ?? null };
  }

  /** Starts a sign-in: remembers the flow in a sealed cookie and sends the browser to the provider. */
  @Get('/auth/oidc/login')
  async login(@Query('team') team: string | undefined, @Res() reply: FastifyReply): Promise<void> {
    const { identity, client } = this.configured();
    const wanted = typeof team === 'string' && /^[0-9a-f-]{36}$/i.test(team) ? team : undefined;
    let started: Awaited<ReturnType<OidcClient['start']>>;
    try {
      started = await client.start(wanted);
    } catch (error) {
      this.metrics.signIn('provider_unreachable');
      this.logger.error({ err: error }, 'the identity provider could not be reached');
      return this.page(reply, 502, 'The identity provider could not be reached; try again soon.');
    }
    void reply
      .header(
        'set-cookie',
        setCookie(FLOW_COOKIE, this.secrets.seal(FLOW_COOKIE, JSON.stringify(started.flow)), {
          maxAgeSeconds: FLOW_SECONDS,
          path: FLOW_PATH,
          secure: identity.publicUrl.protocol === 'https:',
        }),
      )
      .header('cache-control', 'no-store')
      .redirect(started.url.href, 302);
  }

  /** The provider's answer: checks it, starts the session, sets its cookie, back to the portal. */
  @Get('/auth/oidc/callback')
  async callback(@Req() request: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    const { identity, client } = this.configured();
    const secure = identity.publicUrl.protocol === 'https:';
    void reply.header('set-cookie', clearCookie(FLOW_COOKIE, FLOW_PATH, secure));
    const flow = this.flowOf(request.headers.cookie);
    if (flow === undefined) {
      this.metrics.signIn('expired_flow');
      return this.page(
        reply,
        400,
        'This sign-in has expired or was started elsewhere: start again.',
      );
    }
    // The URL the provider redirected to, as registered (the public URL), with its answer.
    const callback = new URL(client.redirectUri);
    callback.search = new URL(request.url, 'http://x').search;
    try {
      const signedIn = await client.finish(callback, flow);
      const session = await this.sessions.start(identity, signedIn, flow.team);
      this.metrics.signIn('success');
      void reply
        .header('set-cookie', [
          clearCookie(FLOW_COOKIE, FLOW_PATH, secure),
          setCookie(SESSION_COOKIE, session.secret, {
            maxAgeSeconds: identity.sessionSeconds,
            path: '/',
            secure,
          }),
        ])
        .header('cache-control', 'no-store')
        .redirect('/', 302);
    } catch (error) {
      if (error instanceof NoAccessError) {
        this.metrics.signIn('no_access');
        return this.page(reply, 403, error.message);
      }
      this.metrics.signIn('refused');
      this.logger.warn({ err: error }, 'sign-in refused');
      return this.page(reply, 400, `Sign-in failed: ${(error as Error).message}`);
    }
  }

  /**
   * Signs out: ends the session here and answers where to sign out at the provider too. A POST
   * from this origin only (the portal's fetch): another site's page cannot end it.
   */
  @Post('/auth/logout')
  async logout(@Req() request: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    const identity = this.identity;
    const origin = request.headers.origin;
    if (identity !== undefined && origin !== undefined && origin !== identity.publicUrl.origin) {
      return void reply.code(403).send({ error: 'sign-out from another origin' });
    }
    const secure = identity?.publicUrl.protocol === 'https:';
    void reply.header('set-cookie', clearCookie(SESSION_COOKIE, '/', secure));
    const secret = parseCookies(request.headers.cookie).get(SESSION_COOKIE);
    const sessionId = secret === undefined ? undefined : await this.runtime.sessionIdOf(secret);
    let providerLogout: string | undefined;
    if (sessionId !== undefined) {
      const ended = await this.sessions.end(sessionId, 'signed out', null);
      if (identity !== undefined && ended !== undefined) {
        providerLogout = await this.runtime.client
          ?.endSessionUrl(ended.idToken, identity.publicUrl.href)
          .catch(() => undefined);
      }
    }
    void reply
      .header('cache-control', 'no-store')
      .send({ signedOut: true, providerLogout: providerLogout ?? null });
  }

  /**
   * OpenID Connect Back-Channel Logout 1.0: the provider posts a logout token (a form field)
   * when a person's session there ends (signed out at the provider or at another application,
   * disabled by an administrator where the provider sends it). A verified token ends the
   * sessions it names (200, also when none is open: the provider must not retry); one that
   * does not verify is a 400 `invalid_request` and ends nothing. Never cached.
   */
  @Post(BACKCHANNEL_LOGOUT_PATH)
  async backChannelLogout(@Req() request: FastifyRequest, @Res() reply: FastifyReply) {
    const { identity, client } = this.configured();
    void reply.header('cache-control', 'no-store');
    const isForm = (request.headers['content-type'] ?? '')
      .toLowerCase()
      .startsWith('application/x-www-form-urlencoded');
    const body = isForm ? (request.body as Record<string, unknown> | undefined) : undefined;
    const token = body?.['logout_token'];
    if (typeof token !== 'string' || token === '') {
      this.metrics.backChannelLogout('invalid');
      return void reply.code(400).send({
        error: 'invalid_request',
        error_description: 'expected a logout_token form field (application/x-www-form-urlencoded)',
      });
    }
    let logout: ProviderLogout;
    try {
      logout = await client.verifyLogoutToken(token);
    } catch (error) {
      if (!(error instanceof LogoutTokenError)) {
        // The provider's keys could not be read: it may retry.
        this.metrics.backChannelLogout('failed');
        this.logger.error({ err: error }, 'could not check a back-channel logout token');
        return void reply.code(503).send({ error: 'temporarily_unavailable' });
      }
      this.metrics.backChannelLogout('invalid');
      this.logger.warn({ err: error }, 'back-channel logout refused');
      return void reply
        .code(400)
        .send({ error: 'invalid_request', error_description: error.message });
    }
    const ended = await this.sessions.endForProvider(identity.issuer.href, logout);
    this.metrics.backChannelLogout(ended > 0 ? 'ended' : 'no_session');
    this.logger.info(
      { subject: logout.subject, providerSessionId: logout.providerSessionId, ended },
      'back-channel logout',
    );
    return void reply.code(200).send();
  }

  private configured(): { identity: IdentityConfig; client: OidcClient } {
    const client = this.runtime.client;
    if (this.identity === undefined || client === undefined) {
      throw new NotFoundException(
        'sign-in through OpenID Connect is not configured (GPUSHARDS_OIDC_*)',
      );
    }
    return { identity: this.identity, client };
  }

  private flowOf(cookieHeader: string | undefined): SignInFlow | undefined {
    const sealed = parseCookies(cookieHeader).get(FLOW_COOKIE);
    if (sealed === undefined) return undefined;
    try {
      return JSON.parse(openSealed(FLOW_COOKIE, sealed)) as SignInFlow;
    } catch {
      return undefined;
    }
  }

  /** A small page for a refused sign-in, with the way back. */
  private page(reply: FastifyReply, status: number, message: string): void {
    const text = message.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
    void reply
      .code(status)
      .header('content-type', 'text/html; charset=utf-8')
      .header('cache-control', 'no-store')
      .send(
        `<!doctype html><meta charset="utf-8"><title>GPU Shards sign-in</title><main><h1>Sign-in</h1><p role="alert">${text}</p><p><a href="/">Back to the portal</a></p></main>`,
      );
  }
}

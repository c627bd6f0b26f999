import { Controller, Inject, NotFoundException, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Public } from '../auth/decorators.js';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import type { IdentityConfig } from '../config/identity-env.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { openSealed, SecretBox } from '../secrets/secret-box.js';
import { IdentityMetrics } from './identity-metrics.js';
import { IdentityRuntime } from './identity-runtime.js';
import { DeviceGrantError, type OidcClient } from './oidc-client.js';
import { NoAccessError, SessionsService } from './sessions.service.js';

/** What a device handle is sealed under (SecretBox's associated data). */
const DEVICE_HANDLE = 'oidc-device-code';

/**
 * A person's CLI signs in through the provider (OAuth 2.0 Device Authorization Grant, brokered
 * by the control plane so the provider's client and secret stay here): `POST /auth/cli/device`
 * starts it and answers the user code, where to enter it, and a handle (the provider's device
 * code sealed with the secrets key: any replica can continue it); `POST /auth/cli/token` with
 * the handle asks the provider once, answering `pending` until the person has approved, then
 * a session like the portal's (the same groups → teams, expiry, recheck and revocation), whose
 * secret the CLI sends as `Authorization: Session gpss_…`: its calls are audited as the person.
 */
@Public()
@Controller()
export class CliSignInController {
  private readonly identity: IdentityConfig | undefined;
  private readonly logger: Logger;

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

  @Post('/auth/cli/device')
  async device(@Res() reply: FastifyReply): Promise<void> {
    const { client } = this.configured();
    void reply.header('cache-control', 'no-store');
    try {
      const started = await client.startDevice();
      return void reply.code(200).send({
        userCode: started.userCode,
        verificationUri: started.verificationUri,
        verificationUriComplete: started.verificationUriComplete,
        expiresIn: started.expiresIn,
        interval: started.interval,
        handle: this.secrets.seal(DEVICE_HANDLE, started.deviceCode),
      });
    } catch (error) {
      this.metrics.signIn('provider_unreachable');
      this.logger.error({ err: error }, 'could not start a device sign-in');
      return void reply.code(502).send({
        error: 'provider_unavailable',
        message: `the identity provider did not start a device sign-in: ${(error as Error).message}`,
      });
    }
  }

  @Post('/auth/cli/token')
  async token(@Req() request: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    const { identity, client } = this.configured();
    void reply.header('cache-control', 'no-store');
    const handle = (request.body as { handle?: unknown } | undefined)?.handle;
    let deviceCode: string | undefined;
    try {
      deviceCode = typeof handle === 'string' ? openSealed(DEVICE_HANDLE, handle) : undefined;
    } catch {
      deviceCode = undefined;
    }
    if (deviceCode === undefined) {
      return void reply.code(400).send({
        error: 'invalid_request',
        message: 'expected {"handle": "…"} as POST /auth/cli/device answered it',
      });
    }
    try {
      const answer = await client.pollDevice(deviceCode);
      if (answer === 'pending' || answer === 'slow_down') {
        return void reply.code(200).send({ status: answer });
      }
      const session = await this.sessions.start(identity, answer, undefined, 'cli');
      this.metrics.signIn('success');
      return void reply.code(200).send({
        status: 'signed_in',
        session: session.secret,
        expiresAt: session.expiresAt.toISOString(),
      });
    } catch (error) {
      if (error instanceof NoAccessError) {
        this.metrics.signIn('no_access');
        return void reply.code(403).send({ error: 'no_access', message: error.message });
      }
      if (error instanceof DeviceGrantError) {
        this.metrics.signIn('refused');
        return void reply.code(400).send({ error: error.code, message: error.message });
      }
      this.metrics.signIn('refused');
      this.logger.warn({ err: error }, 'device sign-in failed');
      return void reply
        .code(502)
        .send({ error: 'provider_unavailable', message: (error as Error).message });
    }
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
}

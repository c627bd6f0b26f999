import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { hashTokenSecret } from '../auth/api-token-secret.js';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { OidcClient } from './oidc-client.js';
import { SessionsService } from './sessions.service.js';

/** How often due sessions are looked for (each is rechecked every GPUSHARDS_OIDC_RECHECK_SECONDS). */
const SWEEP_MS = 1_000;
/** Sessions rechecked per sweep at most (one refresh grant each). */
const SWEEP_BATCH = 50;

/**
 * The relying party at run time, when sign-in is configured: the OpenID Connect client and the
 * sweep that rechecks each session with the provider every GPUSHARDS_OIDC_RECHECK_SECONDS (a
 * refresh-token grant); a refusal (the person signed out at the provider, was disabled, their
 * grant revoked) ends the session. Sessions without a refresh token end at their expiry only.
 */
@Injectable()
export class IdentityRuntime implements OnApplicationBootstrap, OnApplicationShutdown {
  readonly client: OidcClient | undefined;
  private readonly logger: Logger;
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;

  constructor(
    @Inject(CONTROL_PLANE_CONFIG) private readonly config: ControlPlaneConfig,
    private readonly prisma: PrismaService,
    private readonly sessions: SessionsService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.client = config.identity === undefined ? undefined : new OidcClient(config.identity);
    this.logger = logger.child({ module: 'identity' });
  }

  onApplicationBootstrap(): void {
    if (this.client === undefined) return;
    this.timer = setInterval(() => {
      this.sweeping ??= this.sweep().finally(() => (this.sweeping = undefined));
    }, SWEEP_MS);
    this.timer.unref();
  }

  async onApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.sweeping;
  }

  /** The open session a cookie's secret stands for. */
  async sessionIdOf(secret: string): Promise<string | undefined> {
    const session = await this.prisma.webSession.findUnique({
      where: { tokenHash: hashTokenSecret(secret) },
      select: { id: true, endedAt: true },
    });
    return session === null || session.endedAt !== null ? undefined : session.id;
  }

  /** Rechecks the due sessions with the provider; one that fails its refresh ends. */
  async sweep(): Promise<void> {
    const identity = this.config.identity;
    if (identity === undefined || this.client === undefined) return;
    let due: Awaited<ReturnType<SessionsService['claimDue']>>;
    try {
      due = await this.sessions.claimDue(identity, SWEEP_BATCH);
    } catch (error) {
      this.logger.warn({ err: error }, 'could not read the sessions due for a recheck');
      return;
    }
    for (const session of due) {
      if (session.refreshToken === null) continue;
      try {
        await this.sessions.rechecked(session.id, await this.client.refresh(session.refreshToken));
      } catch (error) {
        const said =
          (error as { error?: string; message?: string }).error ?? (error as Error).message;
        if (isProviderRefusal(error)) {
          await this.sessions.end(
            session.id,
            `the identity provider refused it: ${said}`,
            null,
            'refresh_refused',
          );
        } else {
          // The provider could not be reached: not a refusal; asked again at the next recheck.
          this.logger.warn({ err: error, sessionId: session.id }, 'could not recheck a session');
        }
      }
    }
  }
}

/** An OAuth error answer (invalid_grant and the like), not a network failure. */
function isProviderRefusal(error: unknown): boolean {
  const name = (error as { name?: string }).name;
  return name === 'ResponseBodyError' || typeof (error as { error?: unknown }).error === 'string';
}

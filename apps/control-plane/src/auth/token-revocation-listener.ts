import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import pg from 'pg';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { AuthService } from './auth.service.js';

/**
 * NOTIFY channel of revoked token ids. The revoking transaction sends it, so PostgreSQL
 * delivers it exactly when the revocation commits.
 */
export const TOKEN_REVOKED_CHANNEL = 'gpushards_token_revoked';
const RECONNECT_DELAY_MS = 1_000;

/**
 * Makes a token revoked through another control plane on the same PostgreSQL database refused
 * here as soon as the notification arrives (milliseconds), instead of when the token cache's
 * entry expires (TOKEN_CACHE_TTL_MS, the fallback while this connection is down). The
 * embedded database serves one process: nothing to listen to.
 */
@Injectable()
export class TokenRevocationListener implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger: Logger;
  private client: pg.Client | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    @Inject(CONTROL_PLANE_CONFIG) private readonly config: ControlPlaneConfig,
    private readonly auth: AuthService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'token-revocation-listener' });
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.config.database.url === undefined) return;
    await this.connect();
  }

  async onApplicationShutdown(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.config.database.url });
    const lost = (error?: Error) => {
      if (this.client !== client) return;
      this.client = undefined;
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.logger.warn(
        { err: error },
        'token revocation listener lost its database connection; revocations elsewhere take up to the token cache TTL until it is back',
      );
      this.reconnectTimer = setTimeout(() => this.reconnect(), RECONNECT_DELAY_MS);
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (message) => {
      if (message.channel !== TOKEN_REVOKED_CHANNEL || message.payload === undefined) return;
      this.auth.forgetToken(message.payload);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${TOKEN_REVOKED_CHANNEL}`);
    } catch (error) {
      client.removeAllListeners('end');
      await client.end().catch(() => undefined);
      throw error;
    }
    this.client = client;
  }

  private reconnect(): void {
    if (this.closed) return;
    this.connect().then(
      () => this.logger.info('token revocation listener connected again'),
      (error: unknown) => {
        this.logger.warn(
          { err: error },
          'token revocation listener could not connect; trying again',
        );
        this.reconnectTimer = setTimeout(() => this.reconnect(), RECONNECT_DELAY_MS);
      },
    );
  }
}

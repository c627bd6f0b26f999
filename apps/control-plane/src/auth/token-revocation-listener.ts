import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { ListeningConnection } from '../database/listening-connection.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { AuthService } from './auth.service.js';

/**
 * NOTIFY channel of revoked token ids. The revoking transaction sends it, so PostgreSQL
 * delivers it exactly when the revocation commits.
 */
export const TOKEN_REVOKED_CHANNEL = 'gpushards_token_revoked';

/**
 * Makes a token revoked through another control plane on the same PostgreSQL database refused
 * here as soon as the notification arrives (milliseconds), instead of when the token cache's
 * entry expires (TOKEN_CACHE_TTL_MS, the fallback while this connection is down). The
 * embedded database serves one process: nothing to listen to.
 */
@Injectable()
export class TokenRevocationListener implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly connection: ListeningConnection | undefined;

  constructor(
    @Inject(CONTROL_PLANE_CONFIG) config: ControlPlaneConfig,
    auth: AuthService,
    @Inject(LOGGER) logger: Logger,
  ) {
    const url = config.database.url;
    this.connection =
      url === undefined
        ? undefined
        : new ListeningConnection({
            url,
            channel: TOKEN_REVOKED_CHANNEL,
            name: 'token revocation listener',
            whileDown: 'revocations elsewhere take up to the token cache TTL until it is back',
            onNotification: (tokenId) => {
              if (tokenId !== undefined) auth.forgetToken(tokenId);
            },
            logger: logger.child({ module: 'token-revocation-listener' }),
          });
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.connection?.open();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.connection?.close();
  }
}

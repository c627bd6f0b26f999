import { Inject, Injectable } from '@nestjs/common';
import { PrismaService } from '../database/index.js';
import { UnauthenticatedError } from '../errors/domain-errors.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { hashTokenSecret, looksLikeTokenSecret } from './api-token-secret.js';
import { Role, type Caller } from './caller.js';

/** lastUsedAt is a hint for people, not an audit trail: written at most this often per token. */
const LAST_USED_RESOLUTION_MS = 60_000;

const BEARER = /^Bearer +(\S+)\s*$/i;

@Injectable()
export class AuthService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'auth' });
  }

  /** The caller behind an Authorization value ("Bearer gps_..."), or UNAUTHENTICATED. */
  async authenticate(authorization: string | undefined): Promise<Caller> {
    if (authorization === undefined || authorization.trim() === '') {
      throw new UnauthenticatedError(
        'no token: send the header "Authorization: Bearer gps_..." with an API token',
      );
    }
    const secret = BEARER.exec(authorization)?.[1];
    if (secret === undefined) {
      throw new UnauthenticatedError('the Authorization header must be "Bearer <token>"');
    }
    if (!looksLikeTokenSecret(secret)) {
      throw new UnauthenticatedError('invalid token: unknown or revoked');
    }
    const token = await this.prisma.apiToken.findUnique({
      where: { tokenHash: hashTokenSecret(secret) },
    });
    if (token === null || token.revokedAt !== null) {
      throw new UnauthenticatedError('invalid token: unknown or revoked');
    }
    const caller = toCaller(token);
    if (caller === undefined) {
      this.logger.warn({ tokenId: token.id }, 'refused a team token that has no team');
      throw new UnauthenticatedError('invalid token: unknown or revoked');
    }
    await this.touch(token.id, token.lastUsedAt);
    return caller;
  }

  private async touch(tokenId: string, lastUsedAt: Date | null): Promise<void> {
    const now = Date.now();
    if (lastUsedAt !== null && now - lastUsedAt.getTime() < LAST_USED_RESOLUTION_MS) return;
    await this.prisma.apiToken.update({
      where: { id: tokenId },
      data: { lastUsedAt: new Date(now) },
    });
  }
}

interface TokenRow {
  readonly id: string;
  readonly name: string;
  readonly role: string;
  readonly teamId: string | null;
}

/** Undefined for rows no caller can stand for (a team role without a team). */
function toCaller(token: TokenRow): Caller | undefined {
  const base = { tokenId: token.id, tokenName: token.name };
  switch (token.role) {
    case Role.ADMIN:
      return { ...base, role: Role.ADMIN, teamId: null };
    case Role.MEMBER:
    case Role.VIEWER:
      return token.teamId === null
        ? undefined
        : { ...base, role: token.role, teamId: token.teamId };
    default:
      return undefined;
  }
}

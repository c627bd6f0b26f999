import { Inject, Injectable } from '@nestjs/common';
import { AuditService } from '../audit/audit.service.js';
import { ADMIN_TOKENS_LOCK_KEY } from '../auth/admin-token.bootstrap.js';
import { generateTokenSecret } from '../auth/api-token-secret.js';
import { TOKEN_REVOKED_CHANNEL } from '../auth/token-revocation-listener.js';
import { AuthService, type TokenRecord } from '../auth/auth.service.js';
import { Role, type Caller } from '../auth/caller.js';
import { assertTeamVisible } from '../auth/team-scope.js';
import { PrismaService } from '../database/index.js';
import {
  BadUserInputError,
  ConflictError,
  ForbiddenError,
  NotFoundError,
} from '../errors/domain-errors.js';
import {
  pageRequest,
  toConnection,
  type ConnectionArgs,
  type ConnectionShape,
} from '../graphql/connection.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { checkId, DISPLAY_NAME, InputCheck } from '../validation/input.js';
import type { ApiToken, CreatedApiToken } from './api-token.model.js';

export interface NewApiToken {
  readonly teamId?: string | null;
  readonly role: Role;
  readonly name: string;
}

/** Tokens page in creation order; the cursor key is "<createdAt ISO>|<id>". */
const SORT_KEY = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)\|([0-9a-f-]{36})$/;

@Injectable()
export class ApiTokensService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly auth: AuthService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'tokens' });
  }

  /**
   * The caller's own token: `read`, the row authenticating this request read (a cache miss),
   * else its row read now. Either way one read of it per request.
   */
  /** The token of the request; for a signed-in person, their session shown as one. */
  async current(caller: Caller, read?: TokenRecord): Promise<ApiToken> {
    if (read?.id === caller.tokenId) return read;
    if (caller.person !== undefined) {
      const session = await this.prisma.webSession.findUniqueOrThrow({
        where: { id: caller.tokenId },
      });
      return {
        id: session.id,
        name: caller.tokenName,
        role: caller.role,
        prefix: 'session',
        teamId: caller.teamId,
        createdAt: session.createdAt,
        lastUsedAt: null,
        revokedAt: session.endedAt,
        ratePerSecond: null,
        rateBurst: null,
        maxConcurrent: null,
      };
    }
    return this.prisma.apiToken.findUniqueOrThrow({ where: { id: caller.tokenId } });
  }

  /**
   * A team's tokens, or the fleet-wide ones for `null`; the caller must already have been
   * allowed to see them.
   */
  async list(
    teamId: string | null,
    args: ConnectionArgs,
    includeRevoked: boolean,
  ): Promise<ConnectionShape<ApiToken>> {
    const page = pageRequest(args);
    const after = page.afterKey === undefined ? undefined : SORT_KEY.exec(page.afterKey);
    if (after === null) throw BadUserInputError.of('after', 'is not a cursor of this list');
    const rows = await this.prisma.apiToken.findMany({
      where: {
        teamId,
        ...(includeRevoked ? {} : { revokedAt: null }),
        ...(after === undefined
          ? {}
          : {
              OR: [
                { createdAt: { gt: new Date(after[1]!) } },
                { createdAt: new Date(after[1]!), id: { gt: after[2]! } },
              ],
            }),
      },
      orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
      take: page.take,
    });
    return toConnection(page, rows, (token) => `${token.createdAt.toISOString()}|${token.id}`);
  }

  /**
   * Admins create any token. Members create MEMBER or VIEWER tokens of their own team (teamId
   * may be left out). ADMIN tokens are fleet-wide, team tokens need a team.
   */
  async create(caller: Caller, input: NewApiToken): Promise<CreatedApiToken> {
    if (input.role === Role.ADMIN && caller.role !== Role.ADMIN) {
      throw new ForbiddenError('only ADMIN tokens can create ADMIN tokens');
    }
    const check = new InputCheck();
    const name = check.name('name', input.name, DISPLAY_NAME);
    const requestedTeam = typeof input.teamId === 'string' ? checkId('teamId', input.teamId) : null;
    const teamId = requestedTeam ?? (caller.role === Role.ADMIN ? null : caller.teamId);
    if (input.role === Role.ADMIN && teamId !== null) {
      check.problem('teamId', 'ADMIN tokens are fleet-wide: leave teamId out');
    }
    if (input.role !== Role.ADMIN && teamId === null) {
      check.problem('teamId', `${input.role} tokens belong to a team: give its teamId`);
    }
    check.done();
    if (teamId !== null) assertTeamVisible(caller, teamId, 'team', teamId);

    const { secret, hash, prefix } = generateTokenSecret();
    const token = await this.prisma.$transaction(async (tx) => {
      if (teamId !== null && (await tx.team.count({ where: { id: teamId } })) === 0) {
        throw new NotFoundError('team', teamId);
      }
      const created = await tx.apiToken.create({
        data: {
          teamId,
          role: input.role,
          name,
          tokenHash: hash,
          prefix,
          ownerPersonId: caller.person?.id ?? null,
        },
      });
      await this.audit.record(tx, caller, {
        action: 'token.create',
        targetType: 'ApiToken',
        targetId: created.id,
        teamId,
        details: { name, role: input.role, prefix },
      });
      return created;
    });
    this.logger.info(
      { tokenId: token.id, teamId, role: token.role, actorTokenId: caller.tokenId },
      'api token created',
    );
    return { token, secret };
  }

  /**
   * Revoking is final and idempotent (revoking a revoked token returns it unchanged). The last
   * unrevoked admin token cannot be revoked: nobody could manage the fleet until a restart.
   */
  async revoke(caller: Caller, id: string): Promise<ApiToken> {
    const tokenId = checkId('id', id);
    const result = await this.prisma.$transaction(async (tx) => {
      const token = await tx.apiToken.findUnique({ where: { id: tokenId } });
      if (token === null) throw new NotFoundError('token', id);
      assertTeamVisible(caller, token.teamId, 'token', id);
      if (token.revokedAt !== null) return { token, changed: false };
      if (token.role === Role.ADMIN) {
        await tx.$executeRaw`SELECT pg_advisory_xact_lock(${ADMIN_TOKENS_LOCK_KEY})`;
        const others = await tx.apiToken.count({
          where: { role: Role.ADMIN, revokedAt: null, id: { not: tokenId } },
        });
        if (others === 0) {
          throw new ConflictError(
            'this is the last admin token: create another admin token before revoking it',
          );
        }
      }
      const revoked = await tx.apiToken.update({
        where: { id: tokenId },
        data: { revokedAt: new Date() },
      });
      await this.audit.record(tx, caller, {
        action: 'token.revoke',
        targetType: 'ApiToken',
        targetId: tokenId,
        teamId: token.teamId,
        details: { name: token.name, role: token.role, prefix: token.prefix },
      });
      // Delivered at commit to every control plane on this database (TokenRevocationListener).
      await tx.$executeRaw`SELECT pg_notify(${TOKEN_REVOKED_CHANNEL}, ${tokenId})`;
      return { token: revoked, changed: true };
    });
    // Committed: this process refuses the token from now on; the others when the notification
    // arrives (or, without their listening connection, within the token cache's TTL).
    this.auth.forgetToken(tokenId);
    if (result.changed) {
      this.logger.info(
        { tokenId, teamId: result.token.teamId, actorTokenId: caller.tokenId },
        'api token revoked',
      );
    }
    return result.token;
  }

  /**
   * Sets (or, with null, clears) a token's own rate and concurrency limits. Every control
   * plane reads them on the token's next request: this one forgets its cached caller, the
   * others hear the same notification as a revocation.
   */
  async setLimits(
    id: string,
    limits: {
      ratePerSecond: number | null;
      rateBurst: number | null;
      maxConcurrent: number | null;
    },
  ): Promise<ApiToken> {
    const tokenId = checkId('id', id);
    const check = new InputCheck();
    if (limits.ratePerSecond !== null) {
      check.integer('ratePerSecond', limits.ratePerSecond, 1, MAX_RATE_PER_SECOND);
    }
    if (limits.rateBurst !== null) check.integer('rateBurst', limits.rateBurst, 1, MAX_RATE_BURST);
    if (limits.maxConcurrent !== null) {
      check.integer('maxConcurrent', limits.maxConcurrent, 1, MAX_CONCURRENT);
    }
    check.done();
    const token = await this.prisma.$transaction(async (tx) => {
      const found = await tx.apiToken.findUnique({ where: { id: tokenId }, select: { id: true } });
      if (found === null) throw new NotFoundError('token', id);
      const updated = await tx.apiToken.update({ where: { id: tokenId }, data: limits });
      await tx.$executeRaw`SELECT pg_notify(${TOKEN_REVOKED_CHANNEL}, ${tokenId})`;
      return updated;
    });
    this.auth.forgetToken(tokenId);
    this.logger.info({ tokenId, ...limits }, 'api token limits set');
    return token;
  }
}

/** The same bounds as the fleet's variables (config/security-env.ts). */
const MAX_RATE_PER_SECOND = 1_000_000;
const MAX_RATE_BURST = 1_000_000;
const MAX_CONCURRENT = 10_000;

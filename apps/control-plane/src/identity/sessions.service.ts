import { Inject, Injectable } from '@nestjs/common';
import { activeMembership, membershipsOf, type Membership } from '@gpushards/limits';
import { AuditService } from '../audit/audit.service.js';
import { generateSessionSecret } from '../auth/api-token-secret.js';
import { AuthService } from '../auth/auth.service.js';
import type { Caller } from '../auth/caller.js';
import { TOKEN_REVOKED_CHANNEL } from '../auth/token-revocation-listener.js';
import type { IdentityConfig } from '../config/identity-env.js';
import { PrismaService, type Prisma } from '../database/index.js';
import { ForbiddenError, NotFoundError } from '../errors/domain-errors.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { openSealed, SecretBox } from '../secrets/secret-box.js';
import type { ProviderLogout, SignedIn } from './oidc-client.js';
import { IdentityMetrics, type SessionEndKind } from './identity-metrics.js';

/** The name sealed refresh and ID tokens are bound to (SecretBox's associated data). */
const REFRESH_TOKEN = 'oidc-refresh-token';
const ID_TOKEN = 'oidc-id-token';
/** session.end's reason when the provider ended it through the back channel. */
export const PROVIDER_LOGOUT = 'provider logout';

/** A sign-in that gives the person no membership: the provider knew them, the mapping did not. */
export class NoAccessError extends Error {
  override name = 'NoAccessError';
}

export interface StartedSession {
  readonly id: string;
  /** The cookie's value: shown to the browser once, only its sha256 is kept. */
  readonly secret: string;
  readonly expiresAt: Date;
}

/**
 * Browser sessions of people signed in through OpenID Connect: started from what the provider
 * said (their groups through the admins' mapping decide their memberships, libs/limits
 * membershipsOf), switched between their teams, ended by sign-out, an admin, expiry or the
 * provider. Ending one tells every control plane at commit (the token revocation NOTIFY: a
 * session's id is its caller's tokenId), so its requests and open subscriptions are refused.
 */
@Injectable()
export class SessionsService {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    private readonly auth: AuthService,
    private readonly secrets: SecretBox,
    private readonly metrics: IdentityMetrics,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'identity' });
  }

  /** Starts a session for what the provider said; NoAccessError when the groups give nothing. */
  async start(
    config: IdentityConfig,
    signedIn: SignedIn,
    wantedTeam?: string,
    via: 'portal' | 'cli' = 'portal',
  ): Promise<StartedSession> {
    const { secret, hash } = generateSessionSecret();
    const now = new Date();
    const expiresAt = new Date(now.getTime() + config.sessionSeconds * 1000);
    const session = await this.prisma.$transaction(async (tx) => {
      const person = await tx.person.upsert({
        where: {
          issuer_subject: { issuer: config.issuer.href, subject: signedIn.subject },
        },
        create: {
          issuer: config.issuer.href,
          subject: signedIn.subject,
          email: signedIn.email,
          name: signedIn.name,
          groups: [...signedIn.groups],
        },
        update: {
          email: signedIn.email,
          name: signedIn.name,
          groups: [...signedIn.groups],
          lastSignInAt: now,
        },
      });
      const memberships = await this.membershipsFor(tx, signedIn.groups);
      const active = activeMembership(memberships, wantedTeam);
      if (active === undefined) {
        throw new NoAccessError(
          `your groups (${signedIn.groups.join(', ') || 'none'}) give no access to any team: ask an admin to map one of them`,
        );
      }
      const created = await tx.webSession.create({
        data: {
          tokenHash: hash,
          personId: person.id,
          role: active.role,
          teamId: active.teamId,
          memberships: memberships as unknown as Prisma.InputJsonArray,
          refreshToken:
            signedIn.refreshToken === null
              ? null
              : this.secrets.seal(REFRESH_TOKEN, signedIn.refreshToken),
          idToken: signedIn.idToken === null ? null : this.secrets.seal(ID_TOKEN, signedIn.idToken),
          providerSid: signedIn.providerSessionId,
          expiresAt,
          recheckAt: new Date(now.getTime() + config.recheckSeconds * 1000),
        },
      });
      const caller = {
        tokenId: created.id,
        tokenName: signedIn.email ?? signedIn.subject,
        role: active.role,
        teamId: active.teamId,
        person: { id: person.id, subject: person.subject, email: person.email },
      } as Caller;
      await this.audit.record(tx, caller, {
        action: 'session.start',
        targetType: 'Person',
        targetId: person.id,
        teamId: active.teamId,
        details: {
          groups: [...signedIn.groups],
          memberships: memberships as unknown as Prisma.InputJsonArray,
          role: active.role,
          via,
        },
      });
      return created;
    });
    this.logger.info(
      {
        sessionId: session.id,
        subject: signedIn.subject,
        role: session.role,
        teamId: session.teamId,
        via,
      },
      'signed in',
    );
    return { id: session.id, secret, expiresAt };
  }

  /** The memberships of the caller's session (empty for an API token). */
  async membershipsOf(caller: Caller): Promise<Membership[]> {
    if (caller.person === undefined) return [];
    const session = await this.prisma.webSession.findUnique({ where: { id: caller.tokenId } });
    return (session?.memberships as unknown as Membership[] | undefined) ?? [];
  }

  /** Acts as another of the session's memberships (`teamId` null: its ADMIN one). */
  async selectTeam(caller: Caller, teamId: string | null): Promise<Membership> {
    if (caller.person === undefined) {
      throw new ForbiddenError('only a signed-in person switches teams; a token has one', {});
    }
    const memberships = await this.membershipsOf(caller);
    const chosen = memberships.find((m) => m.teamId === teamId);
    if (chosen === undefined) throw new NotFoundError('team', teamId ?? 'admin');
    await this.prisma.$transaction(async (tx) => {
      await tx.webSession.update({
        where: { id: caller.tokenId },
        data: { role: chosen.role, teamId: chosen.teamId },
      });
      await tx.$executeRaw`SELECT pg_notify(${TOKEN_REVOKED_CHANNEL}, ${caller.tokenId})`;
    });
    // Its caller changed: the cached one goes, and open subscriptions end (they were the other team's).
    this.auth.forgetToken(caller.tokenId);
    return chosen;
  }

  /**
   * Ends the session (sign-out, expiry seen by the provider, an admin): refused from the next
   * request on, here at once and elsewhere at the NOTIFY. Returns, when it was still open, its
   * ID token (for the provider's sign-out; null if none); undefined when it had ended already.
   */
  async end(
    sessionId: string,
    reason: string,
    actor: Caller | null,
    kind: SessionEndKind = 'signed_out',
  ): Promise<{ idToken: string | null } | undefined> {
    const ended = await this.prisma.$transaction(async (tx) => {
      const rows = await tx.$queryRaw<
        { idToken: string | null; personId: string; teamId: string | null }[]
      >`
        UPDATE web_session SET ended_at = now(), end_reason = ${reason}
         WHERE id = ${sessionId}::uuid AND ended_at IS NULL
        RETURNING id_token AS "idToken", person_id::text AS "personId", team_id::text AS "teamId"`;
      const row = rows[0];
      if (row === undefined) return undefined;
      await tx.$executeRaw`SELECT pg_notify(${TOKEN_REVOKED_CHANNEL}, ${sessionId})`;
      await this.audit.record(tx, actor, {
        action: 'session.end',
        targetType: 'Person',
        targetId: row.personId,
        teamId: row.teamId,
        details: { sessionId, reason },
      });
      return row;
    });
    this.auth.forgetToken(sessionId);
    if (ended === undefined) return undefined;
    this.metrics.sessionEnded(kind);
    this.logger.info({ sessionId, reason }, 'session ended');
    return { idToken: ended.idToken === null ? null : openSealed(ID_TOKEN, ended.idToken) };
  }

  /**
   * The provider ended a session (a verified back-channel logout token): the open sessions it
   * names end, each as sign-out does (audited, refused everywhere, its subscriptions closed).
   * With a sid, the sessions started in that provider session (of that person, when the token
   * names one too); with only a sub, every open session of that person at this issuer.
   * Returns how many ended.
   */
  async endForProvider(issuer: string, logout: ProviderLogout): Promise<number> {
    const sessions = await this.prisma.webSession.findMany({
      where: {
        endedAt: null,
        person: {
          issuer,
          ...(logout.subject === null ? {} : { subject: logout.subject }),
        },
        ...(logout.providerSessionId === null ? {} : { providerSid: logout.providerSessionId }),
      },
      select: { id: true },
    });
    let ended = 0;
    for (const { id } of sessions) {
      // Ended meanwhile (sign-out, another replica): not counted twice.
      if ((await this.end(id, PROVIDER_LOGOUT, null, 'provider_logout')) !== undefined) ended++;
    }
    return ended;
  }

  /**
   * The sessions due for a recheck with the provider, claimed (their next recheck moved on) so
   * that one control plane rechecks each; with each its refresh token, opened.
   */
  async claimDue(
    config: IdentityConfig,
    limit: number,
  ): Promise<{ id: string; refreshToken: string | null }[]> {
    const rows = await this.prisma.$queryRaw<{ id: string; refreshToken: string | null }[]>`
      UPDATE web_session SET recheck_at = now() + make_interval(secs => ${config.recheckSeconds})
       WHERE id IN (SELECT id FROM web_session
                     WHERE recheck_at <= now() AND ended_at IS NULL AND expires_at > now()
                     ORDER BY recheck_at LIMIT ${limit} FOR UPDATE SKIP LOCKED)
      RETURNING id::text AS id, refresh_token AS "refreshToken"`;
    return rows.map((row) => ({
      id: row.id,
      refreshToken: row.refreshToken === null ? null : openSealed(REFRESH_TOKEN, row.refreshToken),
    }));
  }

  /** Keeps the provider's newer refresh token of a session that passed its recheck. */
  async rechecked(sessionId: string, refreshToken: string): Promise<void> {
    await this.prisma.webSession.updateMany({
      where: { id: sessionId, endedAt: null },
      data: { refreshToken: this.secrets.seal(REFRESH_TOKEN, refreshToken) },
    });
  }

  /** What the groups give, by the mapping, counting only teams that are neither archived nor deleted. */
  private async membershipsFor(
    tx: Prisma.TransactionClient,
    groups: readonly string[],
  ): Promise<Membership[]> {
    if (groups.length === 0) return [];
    const rules = await tx.groupMapping.findMany({
      where: { group: { in: [...groups] } },
      select: { group: true, teamId: true, role: true },
    });
    // A mapping to a team since archived or deleted gives nothing.
    const teams = await tx.team.findMany({
      where: {
        id: { in: rules.flatMap((r) => (r.teamId === null ? [] : [r.teamId])) },
        archivedAt: null,
        deletedAt: null,
      },
      select: { id: true },
    });
    const live = new Set(teams.map((t) => t.id));
    return membershipsOf(
      groups,
      rules.filter((r) => r.teamId === null || live.has(r.teamId)),
    );
  }
}

import { Inject, Injectable } from '@nestjs/common';
import { PrismaService } from '../database/index.js';
import { UnauthenticatedError } from '../errors/domain-errors.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import {
  hashTokenSecret,
  looksLikeSessionSecret,
  looksLikeTokenSecret,
} from './api-token-secret.js';
import { Role, type Caller, type TokenLimits } from './caller.js';
import type { RequestContext } from './request-context.js';

/** lastUsedAt is a hint for people, not an audit trail: written at most this often per token. */
const LAST_USED_RESOLUTION_MS = 60_000;

/**
 * How long a looked-up token is believed without reading its row again. Revoking through this
 * process drops it at once; another control plane on the same PostgreSQL database drops it
 * when the revocation's NOTIFY arrives (TokenRevocationListener), and within this at the
 * latest (its listening connection down).
 */
export const TOKEN_CACHE_TTL_MS = 1_000;

/**
 * How long stillCurrent believes a token's row: open subscriptions check every
 * SUBSCRIPTION_RECHECK_MS, so a token revoked through another control plane loses them within
 * about a second.
 */
export const CURRENT_TOKEN_TTL_MS = 500;

/** Cached tokens at most (a flood of distinct tokens cannot grow memory without bound). */
const TOKEN_CACHE_MAX_ENTRIES = 10_000;

interface CachedCaller {
  readonly caller: Caller;
  readonly expiresAt: number;
}

/** A token's row as authenticating a request read it (all but the secret's hash). */
export interface TokenRecord {
  readonly id: string;
  readonly name: string;
  readonly role: Role;
  readonly prefix: string;
  readonly teamId: string | null;
  readonly createdAt: Date;
  readonly lastUsedAt: Date | null;
  readonly revokedAt: Date | null;
  readonly ratePerSecond: number | null;
  readonly rateBurst: number | null;
  readonly maxConcurrent: number | null;
}

/** Who a secret stands for, and its row when finding that out read it (a cache miss). */
interface Authenticated {
  readonly caller: Caller;
  readonly token?: TokenRecord;
}

const BEARER = /^Bearer +(\S+)\s*$/i;
/** A signed-in browser's cookie, as the GraphQL context passes it on (identity/session-cookie.ts). */
const SESSION = /^Session +(\S+)\s*$/i;

@Injectable()
export class AuthService {
  private readonly logger: Logger;
  /** sha256 of the secret → the caller it stood for, until expiresAt. Valid tokens only. */
  private readonly cache = new Map<string, CachedCaller>();
  /** Raised by every forgetToken: a lookup that overlapped one caches nothing. */
  private generation = 0;
  /** Token id → when this process last wrote (or read) its lastUsedAt. */
  private readonly lastUsed = new Map<string, number>();
  /** sha256 of the secret → the read of its row in flight. */
  private readonly lookups = new Map<string, Promise<Authenticated>>();
  /** Token id → whether its row still stands for the caller seen, until expiresAt. */
  private readonly current = new Map<string, { ok: Promise<boolean>; expiresAt: number }>();
  private readonly forgetListeners = new Set<(tokenId: string) => void>();

  constructor(
    private readonly prisma: PrismaService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'auth' });
  }

  /** The caller behind an Authorization value ("Bearer gps_..."), or UNAUTHENTICATED. */
  async authenticate(authorization: string | undefined): Promise<Caller> {
    return (await this.resolve(authorization)).caller;
  }

  /**
   * Authenticates a request once: sets its caller and, when that read the token's row, the row
   * too (`me` answers from it rather than reading it again). Later calls reuse the caller.
   */
  async authenticateRequest(request: RequestContext): Promise<Caller> {
    if (request.caller !== undefined) return request.caller;
    const { caller, token } = await this.resolve(request.authorization);
    request.caller = caller;
    if (token !== undefined) request.token = token;
    return caller;
  }

  private async resolve(authorization: string | undefined): Promise<Authenticated> {
    if (authorization === undefined || authorization.trim() === '') {
      throw new UnauthenticatedError(
        'no token: send the header "Authorization: Bearer gps_..." with an API token',
      );
    }
    const sessionSecret = SESSION.exec(authorization)?.[1];
    const secret = sessionSecret ?? BEARER.exec(authorization)?.[1];
    if (secret === undefined) {
      throw new UnauthenticatedError('the Authorization header must be "Bearer <token>"');
    }
    const isSession = sessionSecret !== undefined;
    if (isSession ? !looksLikeSessionSecret(secret) : !looksLikeTokenSecret(secret)) {
      throw new UnauthenticatedError(
        isSession ? 'your session has ended: sign in again' : 'invalid token: unknown or revoked',
      );
    }
    const hash = hashTokenSecret(secret);
    const now = Date.now();
    const cached = this.cache.get(hash);
    if (cached !== undefined && cached.expiresAt > now) {
      if (cached.caller.person === undefined) this.touch(cached.caller.tokenId, now);
      return { caller: cached.caller };
    }
    // Requests that miss together (a busy token's entry just expired) share one read.
    // (forgetToken drops the reads in flight: a request after it reads the row anew.)
    let lookup = this.lookups.get(hash);
    if (lookup === undefined) {
      const read = isSession ? this.lookUpSession(hash, now) : this.lookUp(hash, now);
      const started = read.finally(() => {
        if (this.lookups.get(hash) === started) this.lookups.delete(hash);
      });
      this.lookups.set(hash, started);
      lookup = started;
    }
    return lookup;
  }

  /** Reads the token row behind `hash` and remembers its caller (valid tokens only). */
  private async lookUp(hash: string, now: number): Promise<Authenticated> {
    const generation = this.generation;
    // Raw SQL on DirectSql: this runs about once a second per token in use (for a token used
    // less often than that, on every request), and Prisma's findUnique costs about twice the
    // CPU of the same read as Prisma's $queryRaw, which costs about three times DirectSql's.
    // Prepared once per connection: PostgreSQL planned each read (0.17 ms against 0.02 to run).
    const rows = await this.prisma.direct.$queryRaw<TokenLookupRow[]>`/* prepared:token_lookup */
      SELECT token.id::text AS id, token.name, token.role::text AS role,
             token.team_id::text AS "teamId", token.prefix, token.created_at AS "createdAt",
             token.revoked_at AS "revokedAt", token.last_used_at AS "lastUsedAt",
             token.rate_per_second AS "ratePerSecond", token.rate_burst AS "rateBurst",
             token.max_concurrent AS "maxConcurrent",
             team.archived_at IS NOT NULL AS "teamArchived"
        FROM api_token token LEFT JOIN team ON team.id = token.team_id
       WHERE token.token_hash = ${hash}`;
    const token = rows[0];
    if (token === undefined || token.revokedAt !== null) {
      this.cache.delete(hash);
      throw new UnauthenticatedError('invalid token: unknown or revoked');
    }
    if (token.teamArchived) {
      this.cache.delete(hash);
      throw new UnauthenticatedError('its team is archived: its tokens are refused');
    }
    const caller = toCaller(token);
    if (caller === undefined) {
      this.logger.warn({ tokenId: token.id }, 'refused a team token that has no team');
      throw new UnauthenticatedError('invalid token: unknown or revoked');
    }
    if (generation === this.generation) this.remember(hash, caller, now);
    if (token.lastUsedAt !== null && !this.lastUsed.has(token.id)) {
      this.lastUsed.set(token.id, token.lastUsedAt.getTime());
    }
    this.touch(token.id, now);
    const { revokedAt, lastUsedAt, createdAt, prefix } = token;
    return {
      caller,
      token: {
        id: token.id,
        name: token.name,
        role: caller.role,
        prefix,
        teamId: token.teamId,
        createdAt,
        lastUsedAt,
        revokedAt,
        ratePerSecond: token.ratePerSecond ?? null,
        rateBurst: token.rateBurst ?? null,
        maxConcurrent: token.maxConcurrent ?? null,
      },
    };
  }

  /** Reads the browser session behind `hash` (identity/sessions.service.ts writes them). */
  private async lookUpSession(hash: string, now: number): Promise<Authenticated> {
    const generation = this.generation;
    const rows = await this.prisma.direct.$queryRaw<
      SessionLookupRow[]
    >`/* prepared:session_lookup */
      SELECT session.id::text AS id, session.role::text AS role,
             session.team_id::text AS "teamId", session.created_at AS "createdAt",
             session.expires_at AS "expiresAt", session.ended_at AS "endedAt",
             person.id::text AS "personId", person.subject, person.email, person.name,
             team.archived_at IS NOT NULL AS "teamArchived"
        FROM web_session session JOIN person ON person.id = session.person_id
        LEFT JOIN team ON team.id = session.team_id
       WHERE session.token_hash = ${hash}`;
    const session = rows[0];
    if (
      session === undefined ||
      session.endedAt !== null ||
      session.expiresAt.getTime() <= now ||
      session.teamArchived
    ) {
      this.cache.delete(hash);
      throw new UnauthenticatedError(
        session?.teamArchived === true
          ? 'its team is archived: sign in again for your other teams'
          : 'your session has ended: sign in again',
      );
    }
    const person = { id: session.personId, subject: session.subject, email: session.email };
    const base = toCaller({
      id: session.id,
      name: personName(session),
      role: session.role,
      teamId: session.teamId,
    });
    if (base === undefined) throw new UnauthenticatedError('your session has ended: sign in again');
    const caller: Caller = { ...base, person };
    if (generation === this.generation) {
      this.remember(hash, caller, Math.min(now, session.expiresAt.getTime() - TOKEN_CACHE_TTL_MS));
    }
    return {
      caller,
      token: {
        id: session.id,
        name: caller.tokenName,
        role: caller.role,
        prefix: 'session',
        teamId: session.teamId,
        createdAt: session.createdAt,
        lastUsedAt: null,
        revokedAt: null,
        ratePerSecond: null,
        rateBurst: null,
        maxConcurrent: null,
      },
    };
  }

  /**
   * Forgets a token at once (call after the transaction that revoked it committed): this
   * process refuses it from the next request on; others on the revocation's NOTIFY.
   */
  forgetToken(tokenId: string): void {
    this.generation++;
    this.lookups.clear();
    for (const [hash, entry] of this.cache) {
      if (entry.caller.tokenId === tokenId) this.cache.delete(hash);
    }
    this.lastUsed.delete(tokenId);
    this.current.delete(tokenId);
    for (const listener of [...this.forgetListeners]) listener(tokenId);
  }

  /** Calls `listener` with the id of every token forgotten from now on; returns the unsubscribe. */
  onForget(listener: (tokenId: string) => void): () => void {
    this.forgetListeners.add(listener);
    return () => this.forgetListeners.delete(listener);
  }

  /**
   * Whether `caller` still holds: its token is not revoked or deleted, and its role and team
   * are what they were when it authenticated. Read from the database at most once per
   * CURRENT_TOKEN_TTL_MS and token (concurrent checks share one read).
   */
  stillCurrent(caller: Caller): Promise<boolean> {
    const now = Date.now();
    const cached = this.current.get(caller.tokenId);
    if (cached !== undefined && cached.expiresAt > now) return cached.ok;
    if (this.current.size >= TOKEN_CACHE_MAX_ENTRIES) {
      for (const [key, entry] of this.current) {
        if (entry.expiresAt <= now) this.current.delete(key);
      }
    }
    const ok =
      caller.person !== undefined
        ? this.sessionHolds(caller)
        : this.prisma.apiToken
            .findUnique({
              where: { id: caller.tokenId },
              select: {
                role: true,
                teamId: true,
                revokedAt: true,
                team: { select: { archivedAt: true } },
              },
            })
            .then(
              (row) =>
                row !== null &&
                row.revokedAt === null &&
                (row.team?.archivedAt ?? null) === null &&
                row.role === caller.role &&
                row.teamId === caller.teamId,
            );
    // A failed read is not a revocation: it is asked again next time.
    const entry = { ok, expiresAt: now + CURRENT_TOKEN_TTL_MS };
    this.current.set(caller.tokenId, entry);
    ok.catch(() => {
      if (this.current.get(caller.tokenId) === entry) this.current.delete(caller.tokenId);
    });
    return ok;
  }

  /** A session holds while not ended or expired, as it was, its team not archived. */
  private async sessionHolds(caller: Caller): Promise<boolean> {
    const rows = await this.prisma.$queryRaw<{ ok: boolean }[]>`
      SELECT session.ended_at IS NULL AND session.expires_at > now()
             AND session.role::text = ${caller.role}
             AND session.team_id IS NOT DISTINCT FROM ${caller.teamId}::uuid
             AND team.archived_at IS NULL AS ok
        FROM web_session session LEFT JOIN team ON team.id = session.team_id
       WHERE session.id = ${caller.tokenId}::uuid`;
    return rows[0]?.ok === true;
  }

  private remember(hash: string, caller: Caller, now: number): void {
    if (this.cache.size >= TOKEN_CACHE_MAX_ENTRIES) {
      for (const [key, entry] of this.cache) {
        if (entry.expiresAt <= now) this.cache.delete(key);
      }
      if (this.cache.size >= TOKEN_CACHE_MAX_ENTRIES) this.cache.clear();
    }
    this.cache.set(hash, { caller, expiresAt: now + TOKEN_CACHE_TTL_MS });
  }

  /**
   * Writes lastUsedAt at most once a LAST_USED_RESOLUTION_MS per token and process, off the
   * request path: the request neither waits for it nor fails with it.
   */
  private touch(tokenId: string, now: number): void {
    const last = this.lastUsed.get(tokenId);
    if (last !== undefined && now - last < LAST_USED_RESOLUTION_MS) return;
    this.lastUsed.set(tokenId, now);
    this.prisma.apiToken
      .update({ where: { id: tokenId }, data: { lastUsedAt: new Date(now) }, select: { id: true } })
      .catch((error: unknown) => {
        this.logger.debug({ tokenId, err: error }, 'could not record lastUsedAt');
      });
  }
}

interface SessionLookupRow {
  readonly id: string;
  readonly role: string;
  readonly teamId: string | null;
  readonly createdAt: Date;
  readonly expiresAt: Date;
  readonly endedAt: Date | null;
  readonly personId: string;
  readonly subject: string;
  readonly email: string | null;
  readonly name: string | null;
  readonly teamArchived: boolean;
}

/** How a person is named where a token's name would be: e-mail, else name, else subject. */
function personName(person: {
  subject: string;
  email: string | null;
  name: string | null;
}): string {
  return person.email ?? person.name ?? person.subject;
}

interface TokenLookupRow extends TokenRow {
  readonly teamArchived: boolean;
  readonly prefix: string;
  readonly createdAt: Date;
  readonly revokedAt: Date | null;
  readonly lastUsedAt: Date | null;
}

interface TokenRow {
  readonly id: string;
  readonly name: string;
  readonly role: string;
  readonly teamId: string | null;
  readonly ratePerSecond?: number | null;
  readonly rateBurst?: number | null;
  readonly maxConcurrent?: number | null;
}

function limitsOf(token: TokenRow): { limits?: TokenLimits } {
  const limits: { -readonly [K in keyof TokenLimits]: TokenLimits[K] } = {};
  if (token.ratePerSecond !== null && token.ratePerSecond !== undefined)
    limits.ratePerSecond = token.ratePerSecond;
  if (token.rateBurst !== null && token.rateBurst !== undefined) limits.rateBurst = token.rateBurst;
  if (token.maxConcurrent !== null && token.maxConcurrent !== undefined)
    limits.maxConcurrent = token.maxConcurrent;
  return Object.keys(limits).length === 0 ? {} : { limits };
}

/** Undefined for rows no caller can stand for (a team role without a team). */
function toCaller(token: TokenRow): Caller | undefined {
  const base = { tokenId: token.id, tokenName: token.name, ...limitsOf(token) };
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

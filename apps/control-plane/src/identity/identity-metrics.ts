import { Inject, Injectable } from '@nestjs/common';
import { Counter, Gauge, Registry } from 'prom-client';
import { PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';

/** How a sign-in through the provider ended (docs/metrics.md). */
const SIGN_IN_OUTCOMES = [
  'success',
  'no_access', // the groups give no team: 403
  'expired_flow', // the callback without its flow cookie (too late, or started elsewhere)
  'refused', // the provider's answer failed a check, or the provider refused the code
  'provider_unreachable', // the provider could not be reached to start
] as const;
export type SignInOutcome = (typeof SIGN_IN_OUTCOMES)[number];

/** Why a session ended (its audit's reason says more). */
const SESSION_END_KINDS = ['signed_out', 'refresh_refused', 'provider_logout'] as const;
export type SessionEndKind = (typeof SESSION_END_KINDS)[number];

/** A back-channel logout request's outcome. */
const BACK_CHANNEL_OUTCOMES = ['ended', 'no_session', 'invalid', 'failed'] as const;
export type BackChannelOutcome = (typeof BACK_CHANNEL_OUTCOMES)[number];

/**
 * Sign-in metrics: gpushards_sign_ins_total{outcome}, gpushards_sessions_ended_total{reason},
 * gpushards_backchannel_logouts_total{outcome} counted here as they happen, and
 * gpushards_active_sessions read from the database at each scrape (every replica's sessions).
 */
@Injectable()
export class IdentityMetrics {
  private readonly signIns: Counter<'outcome'>;
  private readonly ended: Counter<'reason'>;
  private readonly backChannel: Counter<'outcome'>;

  constructor(registry: Registry, prisma: PrismaService, @Inject(LOGGER) logger: Logger) {
    this.signIns = new Counter({
      name: 'gpushards_sign_ins_total',
      help: 'Sign-ins through the OpenID Connect provider, by outcome (success, no_access, expired_flow, refused, provider_unreachable).',
      labelNames: ['outcome'],
      registers: [registry],
    });
    this.ended = new Counter({
      name: 'gpushards_sessions_ended_total',
      help: 'Sessions ended before their expiry, by reason (signed_out, refresh_refused, provider_logout).',
      labelNames: ['reason'],
      registers: [registry],
    });
    this.backChannel = new Counter({
      name: 'gpushards_backchannel_logouts_total',
      help: 'Back-channel logout requests from the provider, by outcome (ended, no_session, invalid, failed).',
      labelNames: ['outcome'],
      registers: [registry],
    });
    // Every series at 0 from the first scrape: the dashboard's panels and alerts find them on a
    // control plane nobody signed in to yet, and a rate() sees the first sign-in.
    for (const outcome of SIGN_IN_OUTCOMES) this.signIns.inc({ outcome }, 0);
    for (const reason of SESSION_END_KINDS) this.ended.inc({ reason }, 0);
    for (const outcome of BACK_CHANNEL_OUTCOMES) this.backChannel.inc({ outcome }, 0);
    const log = logger.child({ module: 'metrics' });
    new Gauge({
      name: 'gpushards_active_sessions',
      help: 'Sessions of signed-in people that are open now (not ended, not expired), on every control plane.',
      registers: [registry],
      collect: async function (this: Gauge) {
        try {
          this.set(
            await prisma.webSession.count({
              where: { endedAt: null, expiresAt: { gt: new Date() } },
            }),
          );
        } catch (error) {
          // gpushards_metrics_database_up says so; the series is left out of this scrape.
          this.reset();
          log.error({ err: error }, 'metrics could not count the active sessions');
        }
      },
    });
  }

  signIn(outcome: SignInOutcome): void {
    this.signIns.inc({ outcome });
  }

  sessionEnded(reason: SessionEndKind): void {
    this.ended.inc({ reason });
  }

  backChannelLogout(outcome: BackChannelOutcome): void {
    this.backChannel.inc({ outcome });
  }
}

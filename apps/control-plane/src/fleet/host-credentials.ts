import {
  Inject,
  Injectable,
  Module,
  type DynamicModule,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { Counter, Registry } from 'prom-client';
import { PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';

/** A host removeHost retired, and when (its credentials are revoked from that time back). */
export interface RemovedHost {
  readonly hostId: string;
  readonly removedAt: Date;
}

/**
 * Where agents' credentials live outside the control plane (NATS users): revoke makes every
 * listed host's credentials stop working, given the whole list each time (idempotent: a
 * revocation missed once is made by the next call).
 */
export interface HostCredentials {
  /** What revoking means here, for logs ("NATS account revocations"). */
  readonly kind: string;
  revoke(removed: readonly RemovedHost[]): Promise<void>;
}

export const HOST_CREDENTIALS = Symbol('HostCredentials');

/** Outcome of one push of the removed hosts' revocations. */
type RevocationOutcome = 'revoked' | 'failed';

/**
 * After removeHost commits, and once at start: the removed hosts' credentials are revoked
 * where the deployment can (NATS with --auth jwt: the account re-signed with their users
 * revoked, docs/operations.md "NATS users"). Without such a place (nkey or password users, the
 * one box) nothing is revoked here: the control plane refuses a removed host's messages
 * whatever its credentials (RemovedHosts). A failure is logged and counted, never undoes the
 * removal; the next removal or start pushes the whole list again.
 */
@Injectable()
export class HostCredentialRevoker implements OnApplicationBootstrap {
  private readonly outcomes: Counter<'outcome'>;
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    @Inject(HOST_CREDENTIALS) private readonly credentials: HostCredentials | null,
    registry: Registry,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'host-credentials' });
    this.outcomes = new Counter({
      name: 'gpushards_host_credential_revocations_total',
      help: "Pushes of removed hosts' credential revocations (NATS --auth jwt), by outcome (revoked, failed).",
      labelNames: ['outcome'],
      registers: [registry],
    });
  }

  async onApplicationBootstrap(): Promise<void> {
    if (this.credentials === null) return;
    const removed = await this.removedHosts();
    if (removed.length > 0) await this.revokeRemoved(removed);
  }

  /** Whether a removal's credentials can be revoked by this control plane at all. */
  get revokes(): boolean {
    return this.credentials !== null;
  }

  /** Pushes every removed host's revocation; true when the place that holds them took it. */
  async revokeRemoved(removed?: readonly RemovedHost[]): Promise<boolean> {
    if (this.credentials === null) return false;
    const hosts = removed ?? (await this.removedHosts());
    let outcome: RevocationOutcome = 'revoked';
    try {
      await this.credentials.revoke(hosts);
      this.logger.info(
        { hosts: hosts.map((host) => host.hostId), kind: this.credentials.kind },
        "removed hosts' credentials revoked",
      );
    } catch (error) {
      outcome = 'failed';
      this.logger.error(
        { err: error, kind: this.credentials.kind },
        "could not revoke removed hosts' credentials (the control plane still refuses them; the next removal or restart tries again)",
      );
    }
    this.outcomes.inc({ outcome });
    return outcome === 'revoked';
  }

  private async removedHosts(): Promise<RemovedHost[]> {
    const rows = await this.prisma.host.findMany({
      where: { removedAt: { not: null } },
      select: { id: true, removedAt: true },
      orderBy: { id: 'asc' },
    });
    return rows.map((row) => ({ hostId: row.id, removedAt: row.removedAt as Date }));
  }
}

/** Provides HOST_CREDENTIALS (null: this deployment has nowhere to revoke them). */
@Module({})
export class HostCredentialsModule {
  static forRoot(credentials?: HostCredentials): DynamicModule {
    return {
      module: HostCredentialsModule,
      global: true,
      providers: [{ provide: HOST_CREDENTIALS, useValue: credentials ?? null }],
      exports: [HOST_CREDENTIALS],
    };
  }
}

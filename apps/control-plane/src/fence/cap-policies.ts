import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import type { CapPolicyValue, ShardLaunchSpec } from '@gpushards/protocol';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { CapPolicy, PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';

/** Another replica's change reaches this one's launches within this long (replies to agents read it afresh). */
const REFRESH_MS = 10_000;

export function toProtocolPolicy(policy: CapPolicy): CapPolicyValue {
  return policy.toLowerCase() as CapPolicyValue;
}

export function fromProtocolPolicy(policy: CapPolicyValue): CapPolicy {
  return policy.toUpperCase() as CapPolicy;
}

/**
 * Which cap policy each team's shards run under: the team's own (Team.capPolicy), else the
 * fleet's (GPUSHARDS_CAP_POLICY, default KILL). Kept in memory so every launch spec and
 * command can carry it without a query; refreshed from the database every 10 s for changes made
 * through other replicas, and read afresh for the teams of each register and reconcile reply.
 */
@Injectable()
export class CapPolicies implements OnApplicationBootstrap, OnModuleDestroy {
  private overrides = new Map<string, CapPolicy>();
  private timer: NodeJS.Timeout | undefined;
  private readonly logger: Logger;
  readonly fleetDefault: CapPolicy;

  constructor(
    private readonly prisma: PrismaService,
    @Inject(CONTROL_PLANE_CONFIG) config: ControlPlaneConfig,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fence' });
    this.fleetDefault = fromProtocolPolicy(config.capPolicy ?? 'kill');
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => {
      this.refresh().catch((error: unknown) =>
        this.logger.warn({ err: error }, 'could not refresh team cap policies'),
      );
    }, REFRESH_MS);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    clearInterval(this.timer);
  }

  async refresh(): Promise<void> {
    const rows = await this.prisma.team.findMany({
      where: { capPolicy: { not: null } },
      select: { id: true, capPolicy: true },
    });
    this.overrides = new Map(rows.map((row) => [row.id, row.capPolicy!]));
  }

  /** The team's override, or null. */
  override(teamId: string): CapPolicy | null {
    return this.overrides.get(teamId) ?? null;
  }

  /** What the team's shards run under now. */
  effective(teamId: string): CapPolicy {
    return this.overrides.get(teamId) ?? this.fleetDefault;
  }

  /** Records a change made here (the database is already written). */
  noteOverride(teamId: string, policy: CapPolicy | null): void {
    if (policy === null) this.overrides.delete(teamId);
    else this.overrides.set(teamId, policy);
  }

  /** The spec with its team's effective policy, as agents receive it. */
  withPolicy(spec: ShardLaunchSpec): ShardLaunchSpec {
    return { ...spec, capPolicy: toProtocolPolicy(this.effective(spec.teamId)) };
  }

  /**
   * The specs with their teams' policies as the database has them now (one read of those teams;
   * the cache is brought up to date for them): a register or reconcile reply carries a change
   * made through any replica, not only after this one's next refresh.
   */
  async withCurrentPolicies(specs: readonly ShardLaunchSpec[]): Promise<ShardLaunchSpec[]> {
    const teamIds = [...new Set(specs.map((spec) => spec.teamId))];
    if (teamIds.length > 0) {
      const teams = await this.prisma.team.findMany({
        where: { id: { in: teamIds } },
        select: { id: true, capPolicy: true },
      });
      for (const team of teams) this.noteOverride(team.id, team.capPolicy);
    }
    return specs.map((spec) => this.withPolicy(spec));
  }
}

import {
  Inject,
  Injectable,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from '@nestjs/common';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import { InjectClock, type Clock } from './clock.js';
import { HostLivenessService } from './host-liveness.service.js';

/** How often to look for silent hosts: a quarter of the offline time, within 1 to 15 seconds. */
export function sweepIntervalMs(hostOfflineSeconds: number): number {
  return Math.min(15_000, Math.max(1_000, (hostOfflineSeconds * 1000) / 4));
}

/**
 * Marks hosts OFFLINE that sent no heartbeat for GPUSHARDS_HOST_OFFLINE_SECONDS (their shards
 * LOST and released; see HostLivenessService.markSilentHostsOffline). Runs on an interval; time comes
 * from the injected clock, so tests call `sweep()` after moving a ManualClock.
 *
 * A control plane that just started has not been listening for heartbeats, so it marks no
 * host until it has listened for one whole offline period: a restart after downtime does not
 * declare the fleet lost. Several control planes may sweep at once; each host is marked once.
 */
@Injectable()
export class HostOfflineSweeper implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger: Logger;
  private readonly listeningSince: Date;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;

  constructor(
    private readonly liveness: HostLivenessService,
    @InjectClock() private readonly clock: Clock,
    @Inject(CONTROL_PLANE_CONFIG) private readonly config: ControlPlaneConfig,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'fleet' });
    this.listeningSince = clock.now();
  }

  onApplicationBootstrap(): void {
    this.timer = setInterval(() => {
      if (this.running !== undefined) return;
      this.running = this.sweep()
        .catch((error: unknown) => this.logger.error({ err: error }, 'offline sweep failed'))
        .finally(() => {
          this.running = undefined;
        });
    }, sweepIntervalMs(this.config.hostOfflineSeconds));
    this.timer.unref();
  }

  async onModuleDestroy(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }

  /** One pass; returns the hosts it marked OFFLINE. */
  async sweep(): Promise<string[]> {
    const deadline = new Date(this.clock.now().getTime() - this.config.hostOfflineSeconds * 1000);
    if (this.listeningSince.getTime() > deadline.getTime()) return [];
    return this.liveness.markSilentHostsOffline(deadline);
  }
}

import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { PrismaService } from '../database/index.js';

/** How long the set of removed hosts is believed before it is read again. */
export const REMOVED_HOSTS_TTL_MS = 5_000;

/**
 * The hosts removeHost retired, whose agents are refused: every message from them is dropped
 * (a registration rejected). Removing through this process counts at once; through another
 * control plane within REMOVED_HOSTS_TTL_MS. A few ids, read in one statement.
 */
@Injectable()
export class RemovedHosts implements OnApplicationShutdown {
  private ids = new Set<string>();
  private readAt = 0;
  private reading: Promise<void> | undefined;

  constructor(private readonly prisma: PrismaService) {}

  async has(hostId: string): Promise<boolean> {
    if (Date.now() - this.readAt > REMOVED_HOSTS_TTL_MS) {
      this.reading ??= this.read().finally(() => (this.reading = undefined));
      await this.reading;
    }
    return this.ids.has(hostId);
  }

  /** Called once removeHost committed here. */
  removed(hostId: string): void {
    this.ids.add(hostId);
  }

  private async read(): Promise<void> {
    const rows = await this.prisma.host.findMany({
      where: { removedAt: { not: null } },
      select: { id: true },
    });
    this.ids = new Set(rows.map((row) => row.id));
    this.readAt = Date.now();
  }

  onApplicationShutdown(): void {
    this.reading = undefined;
  }
}

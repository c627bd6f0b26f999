import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { readdir } from 'node:fs/promises';
import { findPrismaFolder, PrismaService } from '../database/index.js';
import { LOGGER, type Logger } from '../logging/logger.js';

export type Readiness =
  { readonly ready: true } | { readonly ready: false; readonly reason: string };

/** A probe must answer before the orchestrator's own timeout (Kubernetes: 1 s by default). */
const PROBE_TIMEOUT_MS = 900;

@Injectable()
export class HealthService implements OnModuleInit {
  private readonly logger: Logger;
  /** The migrations this build expects, read once: the folder does not change while running. */
  private expectedMigrations: readonly string[] = [];

  constructor(
    private readonly prisma: PrismaService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'health' });
  }

  async onModuleInit(): Promise<void> {
    const { migrationsDir } = findPrismaFolder();
    const entries = await readdir(migrationsDir, { withFileTypes: true });
    this.expectedMigrations = entries
      .filter((entry) => entry.isDirectory())
      .map((entry) => entry.name);
  }

  /** Ready when the database answers and holds every migration of this build, finished. */
  async readiness(): Promise<Readiness> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<Readiness>((resolve) => {
      timer = setTimeout(
        () => resolve({ ready: false, reason: 'database did not answer in time' }),
        PROBE_TIMEOUT_MS,
      );
    });
    try {
      return await Promise.race([this.checkDatabase(), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async checkDatabase(): Promise<Readiness> {
    try {
      const rows = await this.prisma.$queryRaw<{ name: string }[]>`
        SELECT migration_name AS name FROM _prisma_migrations
         WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL`;
      const applied = new Set(rows.map((row) => row.name));
      const missing = this.expectedMigrations.filter((name) => !applied.has(name));
      if (missing.length > 0) {
        return { ready: false, reason: `database lacks migrations: ${missing.join(', ')}` };
      }
      return { ready: true };
    } catch (error) {
      this.logger.warn({ err: error }, 'readiness check: database unreachable');
      return { ready: false, reason: 'database unreachable' };
    }
  }
}

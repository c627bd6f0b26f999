import { Inject, Injectable, type OnApplicationBootstrap } from '@nestjs/common';
import { chmod, mkdir, open, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { AuditService } from '../audit/audit.service.js';
import { CONTROL_PLANE_CONFIG, type ControlPlaneConfig } from '../config/control-plane-config.js';
import { PrismaService } from '../database/index.js';
import { LOGGER, OPERATOR_OUTPUT, type Logger } from '../logging/logger.js';
import { generateTokenSecret } from './api-token-secret.js';
import { Role } from './caller.js';

export const ADMIN_TOKEN_FILE = 'admin-token';

/**
 * Transaction-scoped advisory lock around "is there another unrevoked admin token?" checks
 * (first-start creation, revoking an admin token), also between control planes sharing one
 * PostgreSQL.
 */
export const ADMIN_TOKENS_LOCK_KEY = 0x67707331; // "gps1"

/**
 * First start: when no unrevoked ADMIN token exists, creates one, writes its secret to
 * `<data folder>/admin-token` (mode 0600) and prints it once. Restarting after every admin
 * token was revoked therefore hands out a new one: whoever can restart the server and read its
 * data folder is the operator anyway.
 */
@Injectable()
export class AdminTokenBootstrap implements OnApplicationBootstrap {
  private readonly logger: Logger;

  constructor(
    private readonly prisma: PrismaService,
    private readonly audit: AuditService,
    @Inject(CONTROL_PLANE_CONFIG) private readonly config: ControlPlaneConfig,
    @Inject(OPERATOR_OUTPUT) private readonly operatorOutput: NodeJS.WritableStream,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'auth' });
  }

  async onApplicationBootstrap(): Promise<void> {
    const path = join(this.config.dataDir, ADMIN_TOKEN_FILE);
    const created = await this.prisma.$transaction(async (tx) => {
      await tx.$executeRaw`SELECT pg_advisory_xact_lock(${ADMIN_TOKENS_LOCK_KEY})`;
      const admins = await tx.apiToken.count({ where: { role: Role.ADMIN, revokedAt: null } });
      if (admins > 0) return undefined;
      const { secret, hash, prefix } = generateTokenSecret();
      const token = await tx.apiToken.create({
        data: { role: Role.ADMIN, name: 'bootstrap admin', tokenHash: hash, prefix, teamId: null },
      });
      await this.audit.record(tx, null, {
        action: 'token.create',
        targetType: 'ApiToken',
        targetId: token.id,
        teamId: null,
        details: { role: Role.ADMIN, name: token.name, reason: 'no admin token existed at start' },
      });
      // Written before commit: if the file cannot be written, no token nobody knows remains.
      await writeSecretFile(path, secret);
      return { id: token.id, secret };
    });
    if (created === undefined) return;
    this.logger.info({ tokenId: created.id, path }, 'created the first admin token');
    this.operatorOutput.write(
      `\nGPU Shards admin token (shown only this once; also saved to ${path}, mode 0600):\n\n` +
        `    ${created.secret}\n\n` +
        `Use it as "Authorization: Bearer <token>". Create team tokens with createApiToken.\n\n`,
    );
  }
}

/** Replaces the file atomically; it is never readable by others, not even for a moment. */
async function writeSecretFile(path: string, secret: string): Promise<void> {
  const directory = join(path, '..');
  await mkdir(directory, { recursive: true, mode: 0o700 });
  const temporary = `${path}.${process.pid}.tmp`;
  const file = await open(temporary, 'w', 0o600);
  try {
    await file.writeFile(`${secret}\n`);
    await file.sync();
  } finally {
    await file.close();
  }
  await chmod(temporary, 0o600);
  await rename(temporary, path);
}

import { readFileSync } from 'node:fs';
import { connectNats, revokedAccountJwt } from '@gpushards/link';
import { credsAuthenticator, nkeys, type NatsConnection } from '@nats-io/transport-node';
import { z } from 'zod';
import type { HostCredentials, RemovedHost } from '../fleet/host-credentials.js';
import type { Logger } from '../logging/logger.js';

/** The subject a NATS full resolver takes an account JWT on (the system account's). */
const CLAIMS_UPDATE = '$SYS.REQ.CLAIMS.UPDATE';
const UPDATE_TIMEOUT_MS = 10_000;

/**
 * What deploy/nats/generate-config.mjs --auth jwt writes for the control plane
 * (credentials/control-plane-revocation.json, GPUSHARDS_NATS_REVOCATION_FILE): the gpushards
 * account as issued, the operator signing key that may re-sign it, a system-account user to
 * push it with, and each agent host's NATS user (public key).
 */
const revocationFileSchema = z.object({
  account: z.string().min(1),
  signingKeySeed: z.string().regex(/^SO[A-Z2-7]+$/, 'must be an operator nkey seed (SO…)'),
  systemCreds: z.string().includes('BEGIN NATS USER JWT', { message: 'must be a .creds text' }),
  agentUsers: z.record(
    z.string(),
    z.string().regex(/^U[A-Z2-7]{55}$/, 'must be a user public key'),
  ),
});
export type RevocationSettings = z.infer<typeof revocationFileSchema>;

/** Reads and checks the revocation file; throws naming what is wrong (never its secrets). */
export function readRevocationFile(path: string): RevocationSettings {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new Error(`GPUSHARDS_NATS_REVOCATION_FILE ${path} cannot be read: ${String(error)}`, {
      cause: error,
    });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    // The parser's message may quote the file, secrets included: not passed on.
    json = undefined;
  }
  if (json === undefined) throw new Error(`GPUSHARDS_NATS_REVOCATION_FILE ${path} is not JSON`);
  const parsed = revocationFileSchema.safeParse(json);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new Error(`GPUSHARDS_NATS_REVOCATION_FILE ${path}: ${problems.join('; ')}`);
  }
  return parsed.data;
}

/**
 * Removed hosts' NATS users revoked in the decentralised (JWT) setup: the gpushards account is
 * re-signed with the operator's signing key, each removed host's user revoked from its removal
 * time back, and pushed to the servers' full resolver, which disconnects the user at once and
 * refuses it from then on (a restart too: the resolver keeps the newest account JWT).
 */
export class NatsHostCredentials implements HostCredentials {
  readonly kind = 'NATS account revocations';

  private constructor(
    private readonly settings: RevocationSettings,
    private readonly system: NatsConnection,
    private readonly logger: Logger,
  ) {}

  static async connect(
    servers: readonly string[],
    settings: RevocationSettings,
    logger: Logger,
  ): Promise<NatsHostCredentials> {
    const system = await connectNats(
      {
        servers,
        name: 'gpushards-control-plane-system',
        extra: {
          authenticator: credsAuthenticator(new TextEncoder().encode(settings.systemCreds)),
        },
      },
      logger,
    );
    return new NatsHostCredentials(settings, system, logger);
  }

  async revoke(removed: readonly RemovedHost[]): Promise<void> {
    const revocations: Record<string, number> = {};
    for (const { hostId, removedAt } of removed) {
      const user = this.settings.agentUsers[hostId];
      if (user === undefined) {
        // Registered under an id the generator did not write a user for (another NATS setup).
        this.logger.warn({ hostId }, 'a removed host has no NATS user in the revocation file');
        continue;
      }
      // Every JWT of that user issued up to its removal's second is refused.
      revocations[user] = Math.ceil(removedAt.getTime() / 1000);
    }
    const signer = nkeys.fromSeed(new TextEncoder().encode(this.settings.signingKeySeed));
    const jwt = await revokedAccountJwt(this.settings.account, signer, revocations);
    const reply = await this.system.request(CLAIMS_UPDATE, new TextEncoder().encode(jwt), {
      timeout: UPDATE_TIMEOUT_MS,
    });
    const answer = JSON.parse(reply.string()) as {
      data?: { code?: number; message?: string };
      error?: { code?: number; description?: string };
    };
    if (answer.error !== undefined || answer.data?.code !== 200) {
      throw new Error(
        `the NATS resolver refused the account update: ${answer.error?.description ?? answer.data?.message ?? reply.string()}`,
      );
    }
  }

  async close(): Promise<void> {
    await this.system.close();
  }
}

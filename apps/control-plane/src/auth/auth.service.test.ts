import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it, mock } from 'node:test';
import type { PrismaService } from '../database/index.js';
import { createLogger } from '../logging/logger.js';
import { generateTokenSecret } from './api-token-secret.js';
import { AuthService, TOKEN_CACHE_TTL_MS } from './auth.service.js';

interface Row {
  id: string;
  name: string;
  role: string;
  teamId: string | null;
  revokedAt: Date | null;
  lastUsedAt: Date | null;
}

/**
 * A PrismaService stand-in with one token row that counts reads and lastUsedAt writes. While
 * `hold` is set, a read waits for it before answering (with the row as it is then).
 */
function fakePrisma(hash: string, row: Row) {
  const calls = { reads: 0, touches: 0 };
  const control: { hold?: Promise<void> } = {};
  // The lookup by hash: `SELECT … FROM api_token WHERE token_hash = ${hash}` (on DirectSql).
  const lookUp = async (_sql: TemplateStringsArray, ...values: unknown[]) => {
    calls.reads++;
    await control.hold;
    return values[0] === hash ? [{ ...row }] : [];
  };
  const prisma = {
    direct: { $queryRaw: lookUp },
    apiToken: {
      update: async ({ data }: { data: { lastUsedAt: Date } }) => {
        calls.touches++;
        row.lastUsedAt = data.lastUsedAt;
        return { id: row.id };
      },
    },
  };
  return { prisma: prisma as unknown as PrismaService, calls, control };
}

describe('token lookups', () => {
  beforeEach(() => mock.timers.enable({ apis: ['Date'], now: 1_000_000 }));
  afterEach(() => mock.timers.reset());

  const { secret, hash } = generateTokenSecret();
  const newRow = (): Row => ({
    id: '00000000-0000-4000-8000-000000000001',
    name: 'ci',
    role: 'MEMBER',
    teamId: '00000000-0000-4000-8000-000000000002',
    revokedAt: null,
    lastUsedAt: null,
  });

  it('reads a token row at most once per TTL and writes lastUsedAt at most once a minute', async () => {
    const row = newRow();
    const { prisma, calls } = fakePrisma(hash, row);
    const auth = new AuthService(prisma, createLogger('silent'));
    const caller = await auth.authenticate(`Bearer ${secret}`);
    assert.equal(caller.tokenId, row.id);
    assert.equal(caller.role, 'MEMBER');
    await auth.authenticate(`Bearer ${secret}`);
    assert.deepEqual(calls, { reads: 1, touches: 1 });

    mock.timers.tick(TOKEN_CACHE_TTL_MS);
    await auth.authenticate(`Bearer ${secret}`);
    assert.deepEqual(calls, { reads: 2, touches: 1 }, 'read again after the TTL, not touched');

    mock.timers.tick(60_000);
    await auth.authenticate(`Bearer ${secret}`);
    assert.deepEqual(calls, { reads: 3, touches: 2 });
  });

  it('forgetToken drops the cached token at once; a revoked row is refused', async () => {
    const row = newRow();
    const { prisma, calls } = fakePrisma(hash, row);
    const auth = new AuthService(prisma, createLogger('silent'));
    await auth.authenticate(`Bearer ${secret}`);
    row.revokedAt = new Date();
    // Another process revoked it: believed until the TTL ends.
    await auth.authenticate(`Bearer ${secret}`);
    auth.forgetToken(row.id);
    await assert.rejects(auth.authenticate(`Bearer ${secret}`), /unknown or revoked/);
    assert.equal(calls.reads, 2);
  });

  it('requests that miss together share one read; one after forgetToken reads anew', async () => {
    const row = newRow();
    const { prisma, calls, control } = fakePrisma(hash, row);
    const auth = new AuthService(prisma, createLogger('silent'));
    let release!: () => void;
    control.hold = new Promise((resolve) => (release = resolve));
    const together = [1, 2, 3].map(() => auth.authenticate(`Bearer ${secret}`));
    assert.equal(calls.reads, 1);
    // Revoked while that read is in flight: a request after forgetToken must not join it.
    row.revokedAt = new Date();
    auth.forgetToken(row.id);
    const after = auth.authenticate(`Bearer ${secret}`);
    assert.equal(calls.reads, 2);
    release();
    await assert.rejects(after, /unknown or revoked/);
    await Promise.allSettled(together);
  });

  it('refuses unknown tokens without caching them', async () => {
    const row = newRow();
    const { prisma, calls } = fakePrisma(hash, row);
    const auth = new AuthService(prisma, createLogger('silent'));
    const other = generateTokenSecret().secret;
    await assert.rejects(auth.authenticate(`Bearer ${other}`), /unknown or revoked/);
    await assert.rejects(auth.authenticate(`Bearer ${other}`), /unknown or revoked/);
    assert.equal(calls.reads, 2);
  });
});

import { Injectable } from '@nestjs/common';
import type { Caller } from '../auth/caller.js';
import type { Prisma, RawSql } from '../database/index.js';

export interface AuditEntry {
  /** "<target>.<verb>", e.g. "team.create", "token.revoke". */
  readonly action: string;
  readonly targetType: string;
  readonly targetId: string;
  /** The team the change belongs to; null for fleet-wide changes. */
  readonly teamId: string | null;
  /** What changed, for people reading the trail; never secrets. */
  readonly details?: Prisma.InputJsonObject;
}

/**
 * The audit trail. Every mutation records through the transaction client of its own change,
 * so the change and its audit row commit or roll back together.
 */
@Injectable()
export class AuditService {
  /**
   * `actor` is null for the control plane's own actions (the bootstrap admin token). A person's
   * session is named by its id (actorTokenId) and the person's subject and e-mail; a token by
   * its id.
   */
  async record(
    tx: Prisma.TransactionClient,
    actor: Caller | null,
    entry: AuditEntry,
  ): Promise<void> {
    await tx.auditEvent.create({
      data: {
        actorTokenId: actor?.tokenId ?? null,
        actorRole: actor?.role ?? null,
        actorSubject: actor?.person?.subject ?? null,
        actorEmail: actor?.person?.email ?? null,
        teamId: entry.teamId,
        action: entry.action,
        targetType: entry.targetType,
        targetId: entry.targetId,
        details: entry.details ?? {},
      },
    });
  }

  /**
   * The control plane's own actions (no actor, as `record` with a null actor), any number in
   * one statement: a sweep that marks a hundred hosts and their shards at once.
   */
  async recordOwn(tx: RawSql, entries: readonly AuditEntry[]): Promise<void> {
    if (entries.length === 0) return;
    const rows = entries.map((entry) => ({
      teamId: entry.teamId,
      action: entry.action,
      targetType: entry.targetType,
      targetId: entry.targetId,
      details: entry.details ?? {},
    }));
    await tx.$executeRaw`
      INSERT INTO audit_event (id, team_id, action, target_type, target_id, details)
      SELECT gen_random_uuid(), (e->>'teamId')::uuid, e->>'action', e->>'targetType',
             e->>'targetId', e->'details'
        FROM jsonb_array_elements(${JSON.stringify(rows)}::jsonb) AS e`;
  }
}

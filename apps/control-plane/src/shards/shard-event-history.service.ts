import { Injectable } from '@nestjs/common';
import type { Caller } from '../auth/caller.js';
import { canSeeTeam, requestedTeam } from '../auth/team-scope.js';
import { Prisma, PrismaService } from '../database/index.js';
import { BadUserInputError, NotFoundError } from '../errors/domain-errors.js';
import type { ShardStateChange } from '../events/shard-event-bus.js';
import { noticesFrom, relayedNoticesSchema } from '../events/shard-event-payloads.js';
import { pageRequest, toConnection, type ConnectionShape } from '../graphql/connection.js';
import { checkId } from '../validation/input.js';
import {
  shardEventView,
  type ShardEvent,
  type ShardEventHistoryArgs,
} from './shard-event.model.js';
import { SHARD_COLUMNS, type ShardRecord } from './shard-record.js';

interface EventRow {
  id: bigint;
  at: Date;
  shardId: string;
  teamId: string;
  kind: string;
  previousState: string | null;
  state: string;
  details: unknown;
}

/**
 * Reading the stored shard events (shard_event, written by recordShardEvents): a shard's
 * history and a team's, newest first, scoped as the shardEvents subscription is (a team token
 * sees its own team's only; another team's shard or team is NOT_FOUND, like one that does not
 * exist).
 */
@Injectable()
export class ShardEventHistoryService {
  constructor(private readonly prisma: PrismaService) {}

  async ofShard(
    caller: Caller,
    shardIdArgument: string,
    args: ShardEventHistoryArgs,
  ): Promise<ConnectionShape<ShardEvent>> {
    const shardId = checkId('shardId', shardIdArgument);
    const page = pageRequest(args);
    const after = page.afterKey === undefined ? undefined : decodeEventKey(page.afterKey);
    const [shard] = await this.prisma.$queryRaw<ShardRecord[]>`
      SELECT ${SHARD_COLUMNS} FROM shard WHERE id = ${shardId}::uuid`;
    if (shard === undefined || !canSeeTeam(caller, shard.teamId)) {
      throw new NotFoundError('shard', shardIdArgument);
    }
    const rows = await this.read(Prisma.sql`shard_id = ${shardId}::uuid`, args, after, page.take);
    return toConnection(page, this.viewsOf(rows, new Map([[shard.id, shard]])), eventKeyOf);
  }

  /** The team's (a team token: its own; admins: teamId's, or every team's without one). */
  async ofTeam(
    caller: Caller,
    teamIdArgument: string | null | undefined,
    args: ShardEventHistoryArgs,
  ): Promise<ConnectionShape<ShardEvent>> {
    const teamId = requestedTeam(caller, teamIdArgument);
    const page = pageRequest(args);
    const after = page.afterKey === undefined ? undefined : decodeEventKey(page.afterKey);
    const scope = teamId === undefined ? Prisma.sql`TRUE` : Prisma.sql`team_id = ${teamId}::uuid`;
    const rows = await this.read(scope, args, after, page.take);
    const ids = [...new Set(rows.map((row) => row.shardId))];
    const shards =
      ids.length === 0
        ? []
        : await this.prisma.$queryRaw<ShardRecord[]>`
            SELECT ${SHARD_COLUMNS} FROM shard WHERE id = ANY(${ids}::uuid[])`;
    return toConnection(
      page,
      this.viewsOf(rows, new Map(shards.map((shard) => [shard.id, shard]))),
      eventKeyOf,
    );
  }

  private read(
    scope: Prisma.Sql,
    args: ShardEventHistoryArgs,
    after: EventKey | undefined,
    take: number,
  ): Promise<EventRow[]> {
    const kinds = args.kinds && args.kinds.length > 0 ? [...new Set(args.kinds)] : undefined;
    return this.prisma.$queryRaw<EventRow[]>`
      SELECT id, at, shard_id::text AS "shardId", team_id::text AS "teamId", kind,
             previous_state AS "previousState", state, details
        FROM shard_event
       WHERE ${scope}
         ${kinds === undefined ? Prisma.empty : Prisma.sql`AND kind = ANY(${kinds}::text[])`}
         ${
           after === undefined
             ? Prisma.empty
             : Prisma.sql`AND (at, id) < (${after.at}::timestamptz, ${after.id}::bigint)`
         }
       ORDER BY at DESC, id DESC
       LIMIT ${take}`;
  }

  /**
   * The rows as events, each with its shard as it is now. A row whose shard is gone (never
   * deleted by the control plane) or whose details do not parse is left out.
   */
  private viewsOf(rows: readonly EventRow[], shards: ReadonlyMap<string, ShardRecord>) {
    const views: (ShardEvent & { key: EventKey })[] = [];
    for (const row of rows) {
      const shard = shards.get(row.shardId);
      const notices = relayedNoticesSchema.safeParse(row.details);
      if (shard === undefined || !notices.success) continue;
      const change: ShardStateChange = {
        shard,
        eventId: String(row.id),
        previousState: row.previousState,
        state: row.state,
        at: row.at,
        ...noticesFrom(notices.data),
      };
      views.push({ ...shardEventView(change, shard), key: { at: row.at, id: String(row.id) } });
    }
    return views;
  }
}

interface EventKey {
  readonly at: Date;
  readonly id: string;
}

/** Newest first; the cursor holds (at, id). */
function eventKeyOf(event: { key: EventKey }): string {
  return `${event.key.at.toISOString()}|${event.key.id}`;
}

function decodeEventKey(key: string): EventKey {
  const [at, id, extra] = key.split('|');
  const date = new Date(at ?? '');
  if (
    extra !== undefined ||
    id === undefined ||
    !/^\d{1,19}$/.test(id) ||
    Number.isNaN(date.getTime())
  ) {
    throw BadUserInputError.of('after', 'is not a cursor returned by this API');
  }
  return { at: date, id };
}

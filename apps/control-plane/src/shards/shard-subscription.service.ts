import { Inject, Injectable } from '@nestjs/common';
import { AuthService } from '../auth/auth.service.js';
import { revocableStream } from '../auth/revocable-stream.js';
import { LOGGER, type Logger } from '../logging/logger.js';
import type { Caller } from '../auth/caller.js';
import { requestedTeam } from '../auth/team-scope.js';
import { ShardEventBus } from '../events/shard-event-bus.js';
import { shardEventView, type ShardEvent } from './shard-event.model.js';

/**
 * The shardEvents subscription: state changes this control plane makes, team-scoped, each one
 * authorized when it is delivered; a revoked token's subscriptions end (revocableStream).
 */
@Injectable()
export class ShardSubscriptionService {
  private readonly logger: Logger;

  constructor(
    private readonly events: ShardEventBus,
    private readonly auth: AuthService,
    @Inject(LOGGER) logger: Logger,
  ) {
    this.logger = logger.child({ module: 'shards' });
  }

  /** State changes of the caller's team's shards (admins: every team, or `teamId`). */
  subscribe(
    caller: Caller,
    teamIdArgument: string | null | undefined,
  ): AsyncIterableIterator<ShardEvent> {
    const teamId = requestedTeam(caller, teamIdArgument);
    const source = this.events.subscribe(
      (event) => teamId === undefined || event.shard.teamId === teamId,
    );
    const iterator: AsyncIterableIterator<ShardEvent> = {
      next: async () => {
        const next = await source.next();
        if (next.done === true) return { value: undefined, done: true };
        return {
          value: shardEventView(next.value, next.value.shard),
          done: false,
        };
      },
      return: async () => {
        await source.return?.();
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return revocableStream(iterator, caller, this.auth, this.logger);
  }
}

import { graphql } from '../graphql.js';
import { ShardFields } from './shards.js';

// Shard events: the live stream (shardEvents) and the team's stored notices (teamShardEvents).

/**
 * What a notice reads of a shard event (logic/shards.ts's NoticeEvent, with the event's shard),
 * live or stored: one selection for both, unmasked with readFragment(NoticeFields, event).
 */
export const NoticeFields = graphql(`
  fragment NoticeFields on ShardEvent {
    id
    at
    kind
    ungovernedCompute {
      action
      killedPids
      message
    }
    violation {
      action
      killedPids
      real {
        human
      }
      cap {
        human
      }
    }
    idle {
      idleSeconds
    }
  }
`);

export const ShardEventsSubscription = graphql(
  `
    subscription ShardEvents($teamId: ID) {
      shardEvents(teamId: $teamId) {
        state
        previousState
        shard {
          ...ShardFields
        }
        ...NoticeFields
      }
    }
  `,
  [ShardFields, NoticeFields],
);

/** The team's latest stored notices, so that they survive a reload (merged with live ones). */
export const ShardNoticesQuery = graphql(
  `
    query ShardNotices($teamId: ID, $first: Int, $kinds: [ShardEventKind!]) {
      teamShardEvents(teamId: $teamId, first: $first, kinds: $kinds) {
        edges {
          node {
            shard {
              id
              name
            }
            ...NoticeFields
          }
        }
      }
    }
  `,
  [NoticeFields],
);

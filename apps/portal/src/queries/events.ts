import { graphql } from '../graphql.js';
import { ShardFields } from './shards.js';

// Shard events: the live stream (shardEvents) and the team's stored notices (teamShardEvents).

export const ShardEventsSubscription = graphql(
  `
    subscription ShardEvents($teamId: ID) {
      shardEvents(teamId: $teamId) {
        id
        at
        kind
        state
        previousState
        shard {
          ...ShardFields
        }
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
    }
  `,
  [ShardFields],
);

/** The team's latest stored notices, so that they survive a reload (merged with live ones). */
export const ShardNoticesQuery = graphql(`
  query ShardNotices($teamId: ID, $first: Int, $kinds: [ShardEventKind!]) {
    teamShardEvents(teamId: $teamId, first: $first, kinds: $kinds) {
      edges {
        node {
          id
          at
          kind
          shard {
            id
            name
          }
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
      }
    }
  }
`);

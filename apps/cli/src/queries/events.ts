import { graphql } from '../graphql.js';

/** A shard's stored events (state changes and notices), newest first: `shards events`. */
export const ShardEventHistory = graphql(`
  query ShardEventHistory($shardId: ID!, $first: Int, $after: String, $kinds: [ShardEventKind!]) {
    shardEventHistory(shardId: $shardId, first: $first, after: $after, kinds: $kinds) {
      edges {
        node {
          id
          at
          kind
          previousState
          state
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
          ungovernedCompute {
            action
            killedPids
            message
          }
          idle {
            action
            idleSeconds
          }
        }
      }
      pageInfo {
        hasNextPage
        endCursor
      }
    }
  }
`);

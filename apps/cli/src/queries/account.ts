import { graphql } from '../graphql.js';

// The caller (whoami, its own team) and a team's usage over a period.

export const Me = graphql(`
  query Me {
    me {
      id
      name
      role
      prefix
      team {
        id
        name
      }
    }
  }
`);

export const Usage = graphql(`
  query Usage($teamId: ID!, $from: String!, $to: String!, $first: Int!, $after: String) {
    usage(teamId: $teamId, from: $from, to: $to) {
      from
      to
      measuredUntil
      reservedGibHours
      usedGibHours
      shardCount
      peakUsed {
        bytes
        human
      }
      shards(first: $first, after: $after) {
        edges {
          node {
            shardId
            shardName
            hostId
            reservedGibHours
            usedGibHours
            peakUsed {
              bytes
              human
            }
          }
        }
        pageInfo {
          hasNextPage
          endCursor
        }
      }
    }
  }
`);

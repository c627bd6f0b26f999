import { graphql } from '../graphql.js';

// The signed-in caller (its role and team) and a team's usage over a period.

export const MeQuery = graphql(`
  query Me {
    me {
      id
      name
      role
      team {
        id
        name
      }
    }
  }
`);

export const UsageQuery = graphql(`
  query Usage($teamId: ID!, $from: String!, $to: String!) {
    usage(teamId: $teamId, from: $from, to: $to) {
      from
      to
      reservedGibHours
      usedGibHours
      shardCount
      peakUsed {
        bytes
      }
    }
  }
`);

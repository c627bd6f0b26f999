import { graphql } from '../graphql.js';

// Teams: names to ids, the fields `teams` prints, their quota and idle policies, and the live
// shards' compute shares that `quota` sums per team.

export const TeamNames = graphql(`
  query TeamNames($first: Int!) {
    teams(first: $first) {
      edges {
        node {
          id
          name
        }
      }
    }
  }
`);

export const TeamFields = graphql(`
  fragment TeamFields on Team {
    id
    name
    createdAt
    quotaPolicy {
      maxTotal {
        bytes
        human
      }
      maxPerShard {
        bytes
        human
      }
      maxShards
      maxGpusPerShard
      allowedGpuModels
      priority
      maxComputeSharePercent
    }
    idlePolicy {
      idleAfterSeconds
      stopAfterSeconds
    }
    usage {
      shardCount
      reserved {
        bytes
        human
      }
    }
  }
`);

export const Teams = graphql(
  `
    query Teams($first: Int!, $after: String) {
      teams(first: $first, after: $after) {
        edges {
          node {
            ...TeamFields
          }
        }
        pageInfo {
          hasNextPage
          endCursor
        }
      }
    }
  `,
  [TeamFields],
);

export const Team = graphql(
  `
    query Team($id: ID!) {
      team(id: $id) {
        ...TeamFields
      }
    }
  `,
  [TeamFields],
);

export const CreateTeam = graphql(
  `
    mutation CreateTeam($name: String!) {
      createTeam(name: $name) {
        ...TeamFields
      }
    }
  `,
  [TeamFields],
);

export const SetQuota = graphql(
  `
    mutation SetQuota($teamId: ID!, $input: QuotaPolicyInput!) {
      setQuotaPolicy(teamId: $teamId, input: $input) {
        ...TeamFields
      }
    }
  `,
  [TeamFields],
);

export const SetIdlePolicy = graphql(
  `
    mutation SetIdlePolicy($teamId: ID!, $idleAfterSeconds: Int, $stopAfterSeconds: Int) {
      setTeamIdlePolicy(
        teamId: $teamId
        idleAfterSeconds: $idleAfterSeconds
        stopAfterSeconds: $stopAfterSeconds
      ) {
        ...TeamFields
      }
    }
  `,
  [TeamFields],
);

/** The live shards' compute shares, for `quota`'s compute row: small rows, a large page. */
export const TeamCompute = graphql(`
  query TeamCompute($teamId: ID!, $first: Int!) {
    shards(teamId: $teamId, first: $first, states: [PLACED, STARTING, RUNNING, STOPPING]) {
      edges {
        node {
          id
          computeSharePercent
          gpus {
            gpuUuid
            releasedAt
          }
        }
      }
    }
  }
`);

import { graphql } from '../graphql.js';

// Teams: the list and creation, a team's quota, idle policy and share, and the compute its
// live shards hold.

export const TeamQuotaQuery = graphql(`
  query TeamQuota($id: ID!) {
    team(id: $id) {
      id
      name
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
        priority
        allowedGpuModels
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
      share {
        guarantee {
          bytes
          human
        }
        borrowed {
          bytes
          human
        }
        pending
      }
    }
  }
`);

/** The shards whose live GPUs the compute gauge counts (RUNNING and those about to be). */
export const TeamComputeQuery = graphql(`
  query TeamCompute($teamId: ID!, $first: Int!) {
    shards(teamId: $teamId, first: $first, states: [PLACED, STARTING, RUNNING, STOPPING]) {
      edges {
        node {
          id
          state
          computeSharePercent
          computeMode
          gpus {
            gpuUuid
            releasedAt
          }
        }
      }
    }
  }
`);

export const TeamsQuery = graphql(`
  query Teams($first: Int!, $after: String) {
    teams(first: $first, after: $after) {
      edges {
        node {
          id
          name
          quotaPolicy {
            maxTotal {
              human
            }
            maxPerShard {
              human
            }
            maxShards
            maxGpusPerShard
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
              human
            }
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

export const CreateTeamMutation = graphql(`
  mutation CreateTeam($name: String!) {
    createTeam(name: $name) {
      id
      name
    }
  }
`);

export const SetQuotaMutation = graphql(`
  mutation SetQuota($teamId: ID!, $input: QuotaPolicyInput!) {
    setQuotaPolicy(teamId: $teamId, input: $input) {
      id
      name
    }
  }
`);

export const SetIdlePolicyMutation = graphql(`
  mutation SetIdlePolicy($teamId: ID!, $idleAfterSeconds: Int, $stopAfterSeconds: Int) {
    setTeamIdlePolicy(
      teamId: $teamId
      idleAfterSeconds: $idleAfterSeconds
      stopAfterSeconds: $stopAfterSeconds
    ) {
      id
      name
      idlePolicy {
        idleAfterSeconds
        stopAfterSeconds
      }
    }
  }
`);

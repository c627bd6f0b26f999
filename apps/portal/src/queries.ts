import { graphql } from './graphql.js';

// Small, flat operations with explicit page sizes, so the API's cost limits accept them.

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

export const ShardFields = graphql(`
  fragment ShardFields on Shard {
    id
    name
    state
    version
    hostId
    teamId
    image
    gpuCount
    createdAt
    startedAt
    failureReason
    exitCode
    computeSharePercent
    computeMode
    idleSince
    queuePosition
    queueReason
    queueEstimatedStart
    memoryPerGpu {
      bytes
      human
    }
    limitPerGpu {
      bytes
      human
    }
    gpus {
      gpuUuid
      index
      releasedAt
      reserved {
        bytes
      }
      used {
        bytes
      }
      real {
        bytes
      }
      busyRatio
      lastKernelAt
    }
  }
`);

export const ShardsQuery = graphql(
  `
    query Shards($first: Int!, $after: String, $teamId: ID, $states: [ShardState!]) {
      shards(first: $first, after: $after, teamId: $teamId, states: $states) {
        edges {
          node {
            ...ShardFields
          }
        }
        pageInfo {
          hasNextPage
          endCursor
        }
      }
    }
  `,
  [ShardFields],
);

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

export const CreateShardMutation = graphql(
  `
    mutation CreateShard($input: CreateShardInput!) {
      createShard(input: $input) {
        id
        name
        state
        hostId
        ...ShardFields
      }
    }
  `,
  [ShardFields],
);

export const StopShardMutation = graphql(`
  mutation StopShard($id: ID!) {
    stopShard(id: $id) {
      id
      state
    }
  }
`);

export const DeleteShardMutation = graphql(`
  mutation DeleteShard($id: ID!) {
    deleteShard(id: $id) {
      id
      state
    }
  }
`);

export const ResizeShardMutation = graphql(`
  mutation ResizeShard($id: ID!, $memoryPerGpu: String!) {
    resizeShard(id: $id, memoryPerGpu: $memoryPerGpu) {
      id
      state
      memoryPerGpu {
        bytes
        human
      }
      limitPerGpu {
        bytes
        human
      }
    }
  }
`);

export const SetShardComputeMutation = graphql(
  `
    mutation SetShardCompute($id: ID!, $percent: Int, $mode: ComputeMode) {
      setShardCompute(id: $id, computeSharePercent: $percent, computeMode: $mode) {
        ...ShardFields
      }
    }
  `,
  [ShardFields],
);

export const PreviewQuery = graphql(`
  query Preview($input: PlacementInput!) {
    placementPreview(input: $input) {
      fits
      hostId
      hostName
      message
      quotaProblem
      verdict
      waitingAhead
      reservedPerGpu {
        human
      }
      hosts {
        hostId
        hostName
        kind
        reason
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

/** Shards their team's idle policy reports idle now, every team's for admins. */
export const IdleShardsQuery = graphql(`
  query IdleShards($first: Int!) {
    shards(first: $first, idle: true) {
      edges {
        node {
          id
          name
          state
          hostId
          idleSince
          computeSharePercent
          computeMode
          team {
            id
            name
          }
          limitPerGpu {
            human
          }
          gpus {
            index
            releasedAt
            busyRatio
            lastKernelAt
            reserved {
              bytes
            }
          }
        }
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

export const TokensQuery = graphql(`
  query Tokens($first: Int!, $after: String, $includeRevoked: Boolean!) {
    adminApiTokens(first: $first, after: $after, includeRevoked: $includeRevoked) {
      edges {
        node {
          id
          name
          prefix
          role
          createdAt
          lastUsedAt
          revokedAt
          team {
            id
            name
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

/** Each team's own tokens (adminApiTokens lists only the fleet-wide ADMIN ones); 100 × 100 costs
 * about 110,000 of the ADMIN limit (200,000). */
export const TeamTokensQuery = graphql(`
  query TeamTokens($first: Int!, $includeRevoked: Boolean!) {
    teams(first: $first) {
      edges {
        node {
          id
          name
          apiTokens(first: 100, includeRevoked: $includeRevoked) {
            edges {
              node {
                id
                name
                prefix
                role
                createdAt
                lastUsedAt
                revokedAt
                team {
                  id
                  name
                }
              }
            }
          }
        }
      }
    }
  }
`);

export const CreateTokenMutation = graphql(`
  mutation CreateToken($name: String!, $role: Role!, $teamId: ID) {
    createApiToken(name: $name, role: $role, teamId: $teamId) {
      secret
      token {
        id
        prefix
      }
    }
  }
`);

export const RevokeTokenMutation = graphql(`
  mutation RevokeToken($id: ID!) {
    revokeApiToken(id: $id) {
      id
      revokedAt
    }
  }
`);

import { graphql } from './graphql.js';

// Small, flat operations with explicit page sizes (cost limits accept them).

export const ShardRow = graphql(`
  fragment ShardRow on Shard {
    id
    name
    state
    hostId
    image
    gpuCount
    createdAt
    startedAt
    stoppedAt
    exitCode
    failureReason
    computeSharePercent
    computeMode
    idleSince
    queuePosition
    queueReason
    queueEstimatedStart
    team {
      id
      name
    }
    memoryPerGpu {
      bytes
      human
    }
    limitPerGpu {
      bytes
      human
    }
    totalMemory {
      bytes
      human
    }
    gpus {
      index
      gpuUuid
      model
      releasedAt
      reserved {
        bytes
        human
      }
      used {
        bytes
        human
      }
      real {
        bytes
        human
      }
      busyRatio
      lastKernelAt
    }
  }
`);

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

export const ListShards = graphql(
  `
    query ListShards(
      $first: Int!
      $after: String
      $teamId: ID
      $states: [ShardState!]
      $idle: Boolean
    ) {
      shards(first: $first, after: $after, teamId: $teamId, states: $states, idle: $idle) {
        edges {
          node {
            ...ShardRow
          }
        }
        pageInfo {
          hasNextPage
          endCursor
        }
      }
    }
  `,
  [ShardRow],
);

/** Names to ids: small rows, so a page of them stays far inside the cost budget. */
export const ShardNames = graphql(`
  query ShardNames($first: Int!, $after: String) {
    shards(first: $first, after: $after) {
      edges {
        node {
          id
          name
          state
          team {
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

export const GetShard = graphql(
  `
    query GetShard($id: ID!) {
      shard(id: $id) {
        ...ShardRow
        command
        env {
          name
        }
        placementPolicy
        version
      }
    }
  `,
  [ShardRow],
);

export const CreateShard = graphql(
  `
    mutation CreateShard($input: CreateShardInput!) {
      createShard(input: $input) {
        ...ShardRow
      }
    }
  `,
  [ShardRow],
);

export const StopShard = graphql(
  `
    mutation StopShard($id: ID!, $grace: Int) {
      stopShard(id: $id, graceSeconds: $grace) {
        ...ShardRow
      }
    }
  `,
  [ShardRow],
);

export const DeleteShard = graphql(
  `
    mutation DeleteShard($id: ID!) {
      deleteShard(id: $id) {
        ...ShardRow
      }
    }
  `,
  [ShardRow],
);

export const ResizeShard = graphql(
  `
    mutation ResizeShard($id: ID!, $memoryPerGpu: String!) {
      resizeShard(id: $id, memoryPerGpu: $memoryPerGpu) {
        ...ShardRow
      }
    }
  `,
  [ShardRow],
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

export const SetShardCompute = graphql(
  `
    mutation SetShardCompute($id: ID!, $percent: Int, $mode: ComputeMode) {
      setShardCompute(id: $id, computeSharePercent: $percent, computeMode: $mode) {
        ...ShardRow
      }
    }
  `,
  [ShardRow],
);

export const ShardEvents = graphql(
  `
    subscription ShardEvents($teamId: ID) {
      shardEvents(teamId: $teamId) {
        at
        kind
        state
        previousState
        shard {
          ...ShardRow
        }
        ungovernedCompute {
          action
          killedPids
          message
        }
      }
    }
  `,
  [ShardRow],
);

export const Preview = graphql(`
  query Preview($input: PlacementInput!) {
    placementPreview(input: $input) {
      fits
      hostId
      hostName
      gpuUuids
      message
      quotaProblem
      verdict
      waitingAhead
      reservedPerGpu {
        bytes
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

export const TokenFields = graphql(`
  fragment TokenFields on ApiToken {
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
`);

export const AdminTokens = graphql(
  `
    query AdminTokens($first: Int!, $after: String, $includeRevoked: Boolean!) {
      adminApiTokens(first: $first, after: $after, includeRevoked: $includeRevoked) {
        edges {
          node {
            ...TokenFields
          }
        }
        pageInfo {
          hasNextPage
          endCursor
        }
      }
    }
  `,
  [TokenFields],
);

export const TeamTokens = graphql(
  `
    query TeamTokens($id: ID!, $first: Int!, $after: String, $includeRevoked: Boolean!) {
      team(id: $id) {
        apiTokens(first: $first, after: $after, includeRevoked: $includeRevoked) {
          edges {
            node {
              ...TokenFields
            }
          }
          pageInfo {
            hasNextPage
            endCursor
          }
        }
      }
    }
  `,
  [TokenFields],
);

export const CreateToken = graphql(
  `
    mutation CreateToken($name: String!, $role: Role!, $teamId: ID) {
      createApiToken(name: $name, role: $role, teamId: $teamId) {
        secret
        token {
          ...TokenFields
        }
      }
    }
  `,
  [TokenFields],
);

export const RevokeToken = graphql(
  `
    mutation RevokeToken($id: ID!) {
      revokeApiToken(id: $id) {
        ...TokenFields
      }
    }
  `,
  [TokenFields],
);

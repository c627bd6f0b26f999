import { graphql } from '../graphql.js';

// Shards: the row every shard command prints (ShardRow), listing and names, one shard, its
// mutations (create, stop, delete, resize, compute), the live event stream, and where a shard
// would be placed (placementPreview).

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

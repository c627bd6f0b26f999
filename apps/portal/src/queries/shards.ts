import { graphql } from '../graphql.js';

// Shards: the fields every shard view reads (ShardFields, also the event stream's), the list,
// the mutations (create, stop, delete, resize, compute), where a shard would be placed
// (placementPreview), and the idle ones.

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

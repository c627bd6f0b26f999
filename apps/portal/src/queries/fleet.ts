import { graphql } from '../graphql.js';

/** The admins' Fleet page: hosts and their GPUs, the shards on them, the host actions. */
export const HostsQuery = graphql(`
  query Hosts($first: Int!) {
    hosts(first: $first) {
      edges {
        node {
          id
          name
          state
          cordoned
          simulated
          computeIsolatedPoolPercent
          lastHeartbeatAt
          memory {
            total {
              human
            }
            reserved {
              human
            }
            free {
              human
            }
          }
          gpus {
            uuid
            index
            model
            total {
              bytes
              human
            }
            capacity {
              bytes
              human
            }
            reserved {
              bytes
              human
            }
            used {
              bytes
              human
            }
            missingSince
            computeGuaranteedPercent
            computeIsolatedPoolPercent
            computeIsolatedPercent
          }
        }
      }
    }
  }
`);

export const FleetShardsQuery = graphql(`
  query FleetShards($first: Int!, $states: [ShardState!]) {
    shards(first: $first, states: $states) {
      edges {
        node {
          id
          name
          state
          hostId
          team {
            id
            name
          }
          gpus {
            gpuUuid
            releasedAt
            reserved {
              bytes
            }
          }
        }
      }
    }
  }
`);

export const HostActionCordon = graphql(`
  mutation Cordon($id: ID!) {
    cordonHost(id: $id) {
      id
      state
      cordoned
    }
  }
`);
export const HostActionUncordon = graphql(`
  mutation Uncordon($id: ID!) {
    uncordonHost(id: $id) {
      id
      state
      cordoned
    }
  }
`);
export const HostActionDrain = graphql(`
  mutation Drain($id: ID!) {
    drainHost(id: $id) {
      id
      state
      cordoned
    }
  }
`);

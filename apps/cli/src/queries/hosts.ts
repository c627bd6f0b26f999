import { graphql } from '../graphql.js';

/** The fleet as `hosts` shows it, and the admins' host actions. */
export const Hosts = graphql(`
  query Hosts($first: Int!, $after: String) {
    hosts(first: $first, after: $after) {
      edges {
        node {
          id
          name
          state
          cordoned
          simulated
          driverVersion
          lastHeartbeatAt
          memory {
            total {
              bytes
              human
            }
            reserved {
              bytes
              human
            }
            free {
              bytes
              human
            }
          }
          computeIsolatedPoolPercent
          gpus {
            index
            model
            uuid
            computeGuaranteedPercent
            computeIsolatedPoolPercent
            computeIsolatedPercent
            total {
              human
            }
            reserved {
              human
            }
            used {
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

export const Cordon = graphql(`
  mutation Cordon($id: ID!) {
    cordonHost(id: $id) {
      id
      state
      cordoned
    }
  }
`);
export const Uncordon = graphql(`
  mutation Uncordon($id: ID!) {
    uncordonHost(id: $id) {
      id
      state
      cordoned
    }
  }
`);
export const Drain = graphql(`
  mutation Drain($id: ID!) {
    drainHost(id: $id) {
      id
      state
      cordoned
    }
  }
`);

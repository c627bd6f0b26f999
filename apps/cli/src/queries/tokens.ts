import { graphql } from '../graphql.js';

// API tokens: listed by admins (all) or per team, created and revoked.

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

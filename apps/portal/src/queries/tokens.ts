import { graphql } from '../graphql.js';

// API tokens: the fleet-wide (ADMIN) ones, each team's own, creation and revocation.

/** What both token lists show of a token (unmasked: the views read the fields directly). */
const TokenFields = graphql(`
  fragment TokenFields on ApiToken @_unmask {
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

export const TokensQuery = graphql(
  `
    query Tokens($first: Int!, $after: String, $includeRevoked: Boolean!) {
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

/** Each team's own tokens (adminApiTokens lists only the fleet-wide ADMIN ones); 100 × 100 costs
 * about 110,000 of the ADMIN limit (200,000). */
export const TeamTokensQuery = graphql(
  `
    query TeamTokens($first: Int!, $includeRevoked: Boolean!) {
      teams(first: $first) {
        edges {
          node {
            id
            name
            apiTokens(first: 100, includeRevoked: $includeRevoked) {
              edges {
                node {
                  ...TokenFields
                }
              }
            }
          }
        }
      }
    }
  `,
  [TokenFields],
);

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

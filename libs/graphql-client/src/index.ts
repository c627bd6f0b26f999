// Every GraphQL operation the portal and the CLI send (src/operations/*.graphql, one file per
// domain of the API), each a typed document: its result and variables come from
// docs/schema.graphql. Small, flat operations with explicit page sizes, so the API's cost limits
// accept them.
export * from './generated/graphql.js';
export type { ResultOf, TypedDocumentNode, VariablesOf } from '@graphql-typed-document-node/core';

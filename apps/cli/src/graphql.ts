import { initGraphQLTada } from 'gql.tada';
import type { introspection } from './generated/graphql-env.js';

/** Typed operations: result and variable types come from docs/schema.graphql. */
export const graphql = initGraphQLTada<{
  introspection: introspection;
  disableMasking: true;
  scalars: { Bytes: string; DateTime: string };
}>();

import { initGraphQLTada } from 'gql.tada';
import type { introspection } from './generated/graphql-env.d.ts';

/** Typed operations: their result and variable types come from docs/schema.graphql. */
export const graphql = initGraphQLTada<{
  introspection: introspection;
  scalars: { Bytes: string; DateTime: string };
}>();

export type { FragmentOf, ResultOf, VariablesOf } from 'gql.tada';

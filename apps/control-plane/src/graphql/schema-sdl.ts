import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { lexicographicSortSchema, printSchema, type GraphQLSchema } from 'graphql';

const HEADER =
  '# The GPU Shards control plane API, generated from the code-first resolvers.\n' +
  '# Do not edit: run `node apps/control-plane/dist/schema-cli.js write` after changing them.\n\n';

/** The SDL as committed in docs/schema.graphql: sorted, so only real changes show in diffs. */
export function printSchemaSdl(schema: GraphQLSchema): string {
  return HEADER + printSchema(lexicographicSortSchema(schema)) + '\n';
}

/** docs/schema.graphql of the repository holding this module (from src/ or dist/). */
export function committedSchemaPath(
  from: string = dirname(fileURLToPath(import.meta.url)),
): string {
  for (let dir = resolve(from); dirname(dir) !== dir; dir = dirname(dir)) {
    if (
      existsSync(join(dir, 'docs')) &&
      existsSync(join(dir, 'package.json')) &&
      existsSync(join(dir, 'apps'))
    ) {
      return join(dir, 'docs', 'schema.graphql');
    }
  }
  throw new Error(`no repository root (with docs/ and apps/) above ${from}`);
}

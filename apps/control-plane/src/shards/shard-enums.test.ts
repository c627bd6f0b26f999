import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { dirname } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));

/**
 * Builds a GraphQL schema in a fresh Node process from one module alone: a query that takes
 * `inputClass` (exported by `modulePath`, relative to this folder) as its argument. Resolves to
 * the printed schema; rejects with the process's output when the schema cannot be built (an
 * enum the input names that nothing registered: "Cannot determine a GraphQL input type").
 */
async function schemaOf(modulePath: string, inputClass: string): Promise<string> {
  const script = `
    import 'reflect-metadata';
    import { NestFactory } from '@nestjs/core';
    import { Args, GraphQLSchemaBuilderModule, GraphQLSchemaFactory, Query, Resolver } from '@nestjs/graphql';
    import { printSchema } from 'graphql';
    const input = (await import(${JSON.stringify(new URL(modulePath, import.meta.url).href)}))[${JSON.stringify(inputClass)}];
    class Probe { probe() { return true; } }
    Reflect.defineMetadata('design:paramtypes', [input], Probe.prototype, 'probe');
    Reflect.defineMetadata('design:returntype', Boolean, Probe.prototype, 'probe');
    Args('input', { type: () => input })(Probe.prototype, 'probe', 0);
    Query(() => Boolean)(Probe.prototype, 'probe', Object.getOwnPropertyDescriptor(Probe.prototype, 'probe'));
    Resolver()(Probe);
    const app = await NestFactory.createApplicationContext(GraphQLSchemaBuilderModule, { logger: false });
    try {
      process.stdout.write(printSchema(await app.get(GraphQLSchemaFactory).create([Probe])));
    } finally {
      await app.close();
    }
  `;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--input-type=module', '--eval', script],
    { cwd: here, timeout: 60_000 },
  );
  return stdout;
}

describe('shard enums', () => {
  // Each input type alone, in a process of its own: no other model registers the enums first.
  for (const inputClass of ['PlacementInput', 'CreateShardInput']) {
    it(`are registered by importing shard-input.model alone (${inputClass})`, async () => {
      const schema = await schemaOf('./shard-input.model.js', inputClass);
      assert.match(schema, /^enum ComputeMode \{$/m);
      assert.match(schema, /^enum PlacementPolicy \{$/m);
      assert.match(schema, new RegExp(`^input ${inputClass} \\{$`, 'm'));
    });
  }
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildSchema, type GraphQLFieldResolver } from 'graphql';
import { bindResolvers } from './code-first-apollo.driver.js';

const sdl = `
  type Query { a: Int, b: Int }
  type Subscription { s: Int }
  type Thing { x: Int }
  interface Named { name: String }
`;

describe('bindResolvers', () => {
  it("sets each resolver on its field: a function as resolve, an object's resolve and subscribe", () => {
    const schema = buildSchema(sdl);
    const a: GraphQLFieldResolver<unknown, unknown> = () => 1;
    const subscribe = async function* () {};
    const x = () => 2;
    bindResolvers(schema, {
      Query: { a, __resolveType: () => 'Query' },
      Subscription: { s: { subscribe } },
      Thing: { x },
    });
    assert.equal(schema.getQueryType()!.getFields()['a']!.resolve, a);
    assert.equal(schema.getQueryType()!.getFields()['b']!.resolve, undefined);
    assert.equal(schema.getSubscriptionType()!.getFields()['s']!.subscribe, subscribe);
    assert.equal(schema.getSubscriptionType()!.getFields()['s']!.resolve, undefined);
    assert.equal(
      (
        schema.getType('Thing') as { getFields(): Record<string, { resolve?: unknown }> }
      ).getFields()['x']!.resolve,
      x,
    );
  });

  it('refuses a resolver for a field or type the schema does not have, or for an interface', () => {
    assert.throws(() => bindResolvers(buildSchema(sdl), { Query: { c: () => 3 } }), /Query\.c/);
    assert.throws(() => bindResolvers(buildSchema(sdl), { Nothing: { c: () => 3 } }), /Nothing/);
    assert.throws(() => bindResolvers(buildSchema(sdl), { Named: { name: () => 'n' } }), /Named/);
  });
});

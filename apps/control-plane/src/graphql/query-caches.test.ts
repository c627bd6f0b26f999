import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildSchema, parse } from 'graphql';
import { DEFAULT_API_LIMITS } from '../config/api-limits.js';
import { QueryCostCache, queryCost } from './query-limits.js';
import { PrecheckCache, precheckQuery } from './query-precheck.js';

const schema = buildSchema(`
  type Item { id: ID! children(first: Int): ItemConnection! }
  type ItemEdge { node: Item! }
  type ItemConnection { edges: [ItemEdge!]! }
  input NewItem { name: String! }
  type Query { items(first: Int): ItemConnection! }
  type Mutation { add(input: NewItem!): Item! }
`);

describe('QueryCostCache', () => {
  const query = parse(`query ($n: Int, $m: Int, $deep: Boolean!) {
    items(first: $n) { edges { node { id children(first: $m) @include(if: $deep) { edges { node { id } } } } } }
  }`);

  it('answers what queryCost answers, for every value of the variables the cost depends on', () => {
    const cache = new QueryCostCache(DEFAULT_API_LIMITS.maxNodes);
    for (const variables of [
      { n: 10, m: 10, deep: true },
      { n: 10, m: 10, deep: false },
      { n: 500, m: 10, deep: true },
      { n: 10, m: 500, deep: true },
      { n: 10, m: 10, deep: true },
      { n: 500, m: 10, deep: true },
    ]) {
      const expected = queryCost(schema, query, variables, undefined, DEFAULT_API_LIMITS.maxNodes);
      assert.equal(
        cache.cost(schema, query, variables, undefined),
        expected,
        JSON.stringify(variables),
      );
    }
    assert.notEqual(
      cache.cost(schema, query, { n: 10, m: 10, deep: true }, undefined),
      cache.cost(schema, query, { n: 500, m: 10, deep: true }, undefined),
    );
  });

  it('a mutation whose input changes every call has one cost; inputs that do not coerce are not remembered', () => {
    const cache = new QueryCostCache(DEFAULT_API_LIMITS.maxNodes);
    const add = parse('mutation ($input: NewItem!) { add(input: $input) { id } }');
    assert.equal(cache.cost(schema, add, { input: { name: 42 } }, undefined), 0);
    const cost = cache.cost(schema, add, { input: { name: 'a' } }, undefined);
    assert.ok(cost > 0);
    assert.equal(cache.cost(schema, add, { input: { name: 'b' } }, undefined), cost);
  });
});

describe('PrecheckCache', () => {
  const limits = { maxTokens: 1_000, maxDepth: 4, maxAliases: 3 };

  it('answers what precheckQuery answers, the second time from memory', () => {
    const cache = new PrecheckCache(limits, 2);
    const deep = '{ a { b { c { d { e { f } } } } } }';
    const fine = '{ a { b } }';
    const aliased = '{ x: a y: a z: a w: a }';
    for (const query of [deep, fine, aliased, deep, fine, aliased, deep]) {
      assert.deepEqual(
        cache.check(query)?.extensions,
        precheckQuery(query, limits)?.extensions,
        query,
      );
    }
    assert.equal(cache.check(fine), undefined);
    assert.equal(cache.check(deep)?.extensions['limit'], 'depth');
    assert.equal(cache.check(aliased)?.extensions['limit'], 'aliases');
  });
});

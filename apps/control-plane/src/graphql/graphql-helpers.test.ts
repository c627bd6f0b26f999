import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BadUserInputError } from '../errors/domain-errors.js';
import { GraphQLBytes } from './bytes.scalar.js';
import {
  decodeCursor,
  encodeCursor,
  MAX_PAGE_SIZE,
  pageRequest,
  toConnection,
} from './connection.js';

describe('Bytes scalar', () => {
  it('serialises bigint and number byte counts as exact decimal strings', () => {
    assert.equal(GraphQLBytes.serialize(85_899_345_920n), '85899345920');
    assert.equal(GraphQLBytes.serialize(2 ** 53 - 1), '9007199254740991');
    assert.equal(GraphQLBytes.serialize(0), '0');
  });

  it('reads strings of digits and JSON integers; refuses the rest', () => {
    assert.equal(GraphQLBytes.parseValue('12884901888'), 12_884_901_888);
    assert.equal(GraphQLBytes.parseValue(1024), 1024);
    for (const bad of ['-1', '1.5', '12g', '', '9007199254740992', '0x10', 1.5, -1, null, {}]) {
      assert.throws(() => GraphQLBytes.parseValue(bad), /whole number of bytes/, String(bad));
    }
    assert.throws(() => GraphQLBytes.serialize(-1));
  });
});

describe('connections', () => {
  it('cursors round-trip and foreign cursors are BAD_USER_INPUT', () => {
    assert.equal(decodeCursor(encodeCursor('ml-team|ü')), 'ml-team|ü');
    for (const bad of ['', 'not a cursor', '====']) {
      assert.throws(() => decodeCursor(bad), BadUserInputError);
    }
  });

  it('first is 1 to MAX_PAGE_SIZE; one extra row tells whether a next page exists', () => {
    assert.throws(() => pageRequest({ first: 0 }), BadUserInputError);
    assert.throws(() => pageRequest({ first: MAX_PAGE_SIZE + 1 }), BadUserInputError);
    const request = pageRequest({ first: 2 });
    assert.equal(request.take, 3);
    const page = toConnection(request, ['a', 'b', 'c'], (key) => key);
    assert.deepEqual(
      page.edges.map((edge) => edge.node),
      ['a', 'b'],
    );
    assert.equal(page.pageInfo.hasNextPage, true);
    assert.equal(page.pageInfo.endCursor, encodeCursor('b'));
    const last = toConnection(
      pageRequest({ first: 2, after: encodeCursor('b') }),
      ['c'],
      (key) => key,
    );
    assert.deepEqual(last.pageInfo, {
      hasNextPage: false,
      hasPreviousPage: true,
      startCursor: encodeCursor('c'),
      endCursor: encodeCursor('c'),
    });
  });
});

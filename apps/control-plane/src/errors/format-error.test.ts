import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GraphQLError } from 'graphql';
import { pino } from 'pino';
import { Writable } from 'node:stream';
import { NoCapacityError, NotFoundError } from './domain-errors.js';
import { createErrorFormatter, INTERNAL_ERROR_MESSAGE } from './format-error.js';

function formatterWithLog() {
  let log = '';
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      log += chunk.toString();
      done();
    },
  });
  return { format: createErrorFormatter(pino(stream)), log: () => log };
}

/** What Apollo hands formatError for an error thrown in a resolver. */
function fromResolver(error: Error): [GraphQLError, { message: string; path: string[] }] {
  const wrapped = new GraphQLError(error.message, { path: ['team'], originalError: error });
  return [wrapped, { message: error.message, path: ['team'] }];
}

describe('createErrorFormatter', () => {
  it('domain errors keep message, code and their extensions', () => {
    const { format } = formatterWithLog();
    const [error, formatted] = fromResolver(
      new NoCapacityError('no host fits', [
        { hostId: 'h1', hostName: 'gpu-1', reason: 'GPUs full' },
      ]),
    );
    assert.deepEqual(format(formatted, error), {
      message: 'no host fits',
      path: ['team'],
      extensions: {
        code: 'NO_CAPACITY',
        hosts: [{ hostId: 'h1', hostName: 'gpu-1', reason: 'GPUs full' }],
      },
    });
    const [notFound, notFoundFormatted] = fromResolver(new NotFoundError('team', 'x'));
    assert.equal(format(notFoundFormatted, notFound).extensions?.['code'], 'NOT_FOUND');
  });

  it('a database that gave no connection in time answers UNAVAILABLE (retry), logged as a warning', () => {
    for (const code of ['P2024', 'P2028']) {
      const { format, log } = formatterWithLog();
      const busy = Object.assign(
        new Error('Transaction API error: Unable to start a transaction in the given time.'),
        { code },
      );
      const [error, formatted] = fromResolver(busy);
      const result = format({ ...formatted, extensions: { code: 'INTERNAL_SERVER_ERROR' } }, error);
      assert.equal(result.extensions?.['code'], 'UNAVAILABLE', code);
      assert.equal(result.extensions?.['retryAfterSeconds'], 1);
      assert.match(result.message, /nothing was written/);
      assert.doesNotMatch(result.message, /Transaction API/);
      assert.match(log(), /"level":40.*did not take a request in time/);
    }
  });

  it('anything else becomes a bare INTERNAL_SERVER_ERROR, logged in full on the server only', () => {
    const { format, log } = formatterWithLog();
    const leak = new Error(
      'duplicate key value violates unique constraint "api_token_token_hash_key"',
    );
    const [error, formatted] = fromResolver(leak);
    const result = format(
      { ...formatted, extensions: { code: 'INTERNAL_SERVER_ERROR', stacktrace: ['at x'] } },
      error,
    );
    assert.deepEqual(result, {
      message: INTERNAL_ERROR_MESSAGE,
      path: ['team'],
      extensions: { code: 'INTERNAL_SERVER_ERROR' },
    });
    assert.match(log(), /api_token_token_hash_key/);
  });
});

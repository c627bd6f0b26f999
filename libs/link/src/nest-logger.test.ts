import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';

import { pino } from 'pino';

import { natsAuthenticator } from './nats-connection.js';
import { PinoNestLogger } from './nest-logger.js';

function capture() {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  return { lines, logger: pino({ level: 'trace', base: { service: 'x' } }, sink) };
}

describe('PinoNestLogger', () => {
  test("Nest's messages become pino lines with their context; errors keep their stack", async () => {
    const { lines, logger } = capture();
    const nest = new PinoNestLogger(logger);
    nest.log('Mapped {/graphql, POST}', 'RouterExplorer');
    nest.error('failed', 'Error: failed\n    at x', 'ExceptionHandler');
    nest.warn({ event: 'odd' }, 'Scanner');
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(
      lines.map(({ level, msg, context, stack, event, service }) => ({
        level,
        msg,
        context,
        stack,
        event,
        service,
      })),
      [
        {
          level: 30,
          msg: 'Mapped {/graphql, POST}',
          context: 'RouterExplorer',
          stack: undefined,
          event: undefined,
          service: 'x',
        },
        {
          level: 50,
          msg: 'failed',
          context: 'ExceptionHandler',
          stack: 'Error: failed\n    at x',
          event: undefined,
          service: 'x',
        },
        {
          level: 40,
          msg: undefined,
          context: 'Scanner',
          stack: undefined,
          event: 'odd',
          service: 'x',
        },
      ],
    );
  });
});

describe('natsAuthenticator', () => {
  test('none without auth; a missing seed file is named in the error', () => {
    assert.equal(natsAuthenticator(undefined), undefined);
    assert.throws(
      () => natsAuthenticator({ kind: 'nkey', seedFile: '/nonexistent/agent.nk' }),
      /cannot read the NATS nkey seed file \/nonexistent\/agent\.nk/,
    );
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import pino from 'pino';
import { startPostgres, type PostgresServer } from '../testing/index.js';
import { ListeningConnection } from './listening-connection.js';

const CHANNEL = 'gpushards_listening_test';

let postgres: PostgresServer | undefined;
let sender: pg.Client | undefined;
before(async () => {
  postgres = await startPostgres();
  sender = new pg.Client({ connectionString: postgres.url });
  await sender.connect();
});
after(async () => {
  await sender?.end();
  await postgres?.stop();
});

/** The payloads heard, and a way to wait for the next one that matches. */
function heard() {
  const payloads: (string | undefined)[] = [];
  const waiters: { match: (payload?: string) => boolean; resolve: () => void }[] = [];
  return {
    payloads,
    onNotification(payload: string | undefined) {
      payloads.push(payload);
      for (const waiter of waiters.filter((w) => w.match(payload))) waiter.resolve();
    },
    /** Resolves once a payload that `match` accepts has been heard. */
    next(match: (payload?: string) => boolean): Promise<void> {
      if (payloads.some(match)) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ match, resolve }));
    },
  };
}

/** Log lines as objects, to wait for "connected again". */
function recordingLogger() {
  const lines: { msg: string }[] = [];
  const logger = pino(
    { level: 'info' },
    { write: (line: string) => void lines.push(JSON.parse(line) as { msg: string }) },
  );
  return { logger, lines };
}

const notify = (payload: string) => sender!.query('SELECT pg_notify($1, $2)', [CHANNEL, payload]);

describe('ListeningConnection', { timeout: 60_000 }, () => {
  it('hears its channel, not others; after its backend is killed it connects again and hears what comes next', async () => {
    const ear = heard();
    const { logger, lines } = recordingLogger();
    const connection = new ListeningConnection({
      url: postgres!.url,
      channel: CHANNEL,
      name: 'test listener',
      whileDown: 'the test misses messages',
      onNotification: (payload) => ear.onNotification(payload),
      logger,
    });
    await connection.open();
    try {
      await sender!.query(`SELECT pg_notify('gpushards_other_channel', 'elsewhere')`);
      await notify('first');
      await ear.next((p) => p === 'first');
      assert.deepEqual(ear.payloads, ['first'], 'another channel is not heard');

      const pid = await connection.current!.query<{ pid: number }>(
        'SELECT pg_backend_pid() AS pid',
      );
      await sender!.query('SELECT pg_terminate_backend($1)', [pid.rows[0]!.pid]);
      // Sent until the new connection listens: whatever it misses meanwhile, "again" is heard.
      let round = 0;
      const sending = setInterval(() => void notify(`again-${round++}`).catch(() => undefined), 50);
      try {
        await ear.next((p) => p?.startsWith('again-') === true);
      } finally {
        clearInterval(sending);
      }
      assert.ok(
        lines.some((line) =>
          line.msg.startsWith(
            'test listener lost its database connection; the test misses messages',
          ),
        ),
        'the loss is logged with what it costs',
      );
      assert.ok(lines.some((line) => line.msg === 'test listener connected again'));
    } finally {
      await connection.close();
    }
    assert.equal(connection.current, undefined, 'closed: no connection');
  });

  it('open throws when the database cannot be reached, and leaves nothing running', async () => {
    const connection = new ListeningConnection({
      url: 'postgresql://postgres@127.0.0.1:9/none',
      channel: CHANNEL,
      name: 'test listener',
      whileDown: 'nothing',
      onNotification: () => undefined,
      logger: pino({ level: 'silent' }),
    });
    await assert.rejects(connection.open(), /ECONNREFUSED/);
    assert.equal(connection.current, undefined);
    await connection.close();
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import pg from 'pg';

import { startPostgres, type PostgresServer } from '../testing/postgres-server.js';
import { openDatabaseBackend } from './database-backend.js';

let postgres: PostgresServer | undefined;
before(async () => {
  postgres = await startPostgres();
});
after(async () => {
  await postgres?.stop();
});

describe('the PostgreSQL backend', () => {
  it('lives on when the server ends an idle connection that no adapter listens for', async () => {
    const heard: Error[] = [];
    let told: (() => void) | undefined;
    const ended = new Promise<void>((resolve) => (told = resolve));
    const backend = await openDatabaseBackend(
      { url: postgres!.url, embeddedDataDir: '', poolSize: 2 },
      (error) => {
        heard.push(error);
        told?.();
      },
    );
    try {
      // An adapter connects (PrismaPg listens on the pool), runs a query, and is disposed
      // again: its listener goes, and the pool keeps the connection idle.
      const adapter = await backend.clientAdapter.connect();
      const result = await adapter.queryRaw({
        sql: 'SELECT pg_backend_pid()',
        args: [],
        argTypes: [],
      });
      const pid = Number(result.rows[0]![0]);
      await adapter.dispose();
      const admin = new pg.Client({ connectionString: postgres!.url });
      await admin.connect();
      try {
        await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      } finally {
        await admin.end();
      }
      // Without a listener of the backend's own, this 'error' would be an uncaught exception.
      await ended;
      assert.match(heard[0]!.message, /terminating connection/);
      const again = await backend.clientAdapter.connect();
      const one = await again.queryRaw({ sql: 'SELECT 1', args: [], argTypes: [] });
      assert.deepEqual(one.rows, [[1]], 'the pool opens another connection');
      await again.dispose();
    } finally {
      await backend.close();
    }
  });
});

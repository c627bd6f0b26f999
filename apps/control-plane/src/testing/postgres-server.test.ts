import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { startPostgres, type PostgresServer } from './postgres-server.js';

async function query(server: PostgresServer, sql: string): Promise<unknown[]> {
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  try {
    return (await client.query(sql)).rows;
  } finally {
    await client.end();
  }
}

describe('startPostgres', () => {
  let server: PostgresServer;
  before(async () => {
    server = await startPostgres();
  });
  after(() => server.stop());

  it('serves PostgreSQL on 127.0.0.1 and on a unix socket in its folder', async () => {
    assert.match(server.url, /^postgresql:\/\/postgres@127\.0\.0\.1:\d+\/postgres$/);
    assert.deepEqual(await query(server, 'SELECT 1 AS one'), [{ one: 1 }]);
    assert.ok(existsSync(`${server.dir}/.s.PGSQL.${server.port}`));
  });

  it('keeps committed data across kill -9 and restart', async () => {
    await query(server, 'CREATE TABLE crash (value text); INSERT INTO crash VALUES ($$kept$$)');
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    client.on('error', () => {}); // the server dies under it
    await server.kill();
    await assert.rejects(client.query('SELECT 1'));
    await assert.rejects(query(server, 'SELECT 1'), /ECONNREFUSED/);
    await server.restart();
    assert.deepEqual(await query(server, 'SELECT value FROM crash'), [{ value: 'kept' }]);
    await client.end().catch(() => {});
  });

  it('restarts after a clean shutdown on the same port', async () => {
    const port = server.port;
    await server.restart();
    assert.equal(server.port, port);
    assert.deepEqual(await query(server, 'SELECT count(*)::int AS n FROM crash'), [{ n: 1 }]);
  });

  it('stop() removes the cluster', async () => {
    const other = await startPostgres();
    await other.stop();
    assert.equal(existsSync(other.dir), false);
  });
});

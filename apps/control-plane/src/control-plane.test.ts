import { GraphQLSchemaHost } from '@nestjs/graphql';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Writable } from 'node:stream';
import { WebSocket } from 'ws';
import { startApiTestHarness, type ApiTestHarness } from './testing/api-test-harness.js';
import { ADMIN_TOKEN_FILE } from './auth/admin-token.bootstrap.js';
import { createControlPlane } from './control-plane.js';
import { committedSchemaPath, printSchemaSdl } from './graphql/schema-sdl.js';
import { createTestDatabase } from './testing/index.js';

/** The app shell: explorer, health, metrics, schema file, subscriptions transport, first start. */

function collector(): { stream: Writable; text: () => string } {
  let text = '';
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      text += chunk.toString();
      done();
    },
  });
  return { stream, text: () => text };
}

describe('first start', () => {
  it('creates an admin token, writes it with mode 0600, prints it once and not again on restart', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'gpushards-first-start-'));
    // A migrated, empty database (made from the suite's template: faster than a fresh one).
    const testDatabase = await createTestDatabase('pglite');
    await testDatabase.prisma.close();
    const database = testDatabase.config;
    try {
      const firstOutput = collector();
      const firstLog = collector();
      const first = await createControlPlane({
        dataDir,
        database,
        port: 0,
        operatorOutput: firstOutput.stream,
        logDestination: firstLog.stream,
      });
      await first.close();
      const path = join(dataDir, ADMIN_TOKEN_FILE);
      assert.equal((await stat(path)).mode & 0o777, 0o600);
      const secret = (await readFile(path, 'utf8')).trim();
      assert.match(secret, /^gps_[A-Za-z0-9_-]{43}$/);
      assert.equal(firstOutput.text().split(secret).length - 1, 1, 'printed exactly once');
      assert.ok(firstLog.text().includes('created the first admin token'));
      assert.ok(!firstLog.text().includes(secret), 'the secret never reaches the log');

      const secondOutput = collector();
      const second = await createControlPlane({
        dataDir,
        database,
        port: 0,
        logLevel: 'silent',
        operatorOutput: secondOutput.stream,
      });
      try {
        assert.equal(secondOutput.text(), '', 'an admin token exists: nothing printed');
        assert.equal((await readFile(path, 'utf8')).trim(), secret);
        const response = await fetch(second.graphqlUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${secret}` },
          body: JSON.stringify({ query: '{ me { role } }' }),
        });
        assert.deepEqual(await response.json(), { data: { me: { role: 'ADMIN' } } });
      } finally {
        await second.close();
      }
    } finally {
      await testDatabase.cleanup();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe('app shell', () => {
  let h: ApiTestHarness;
  before(async () => {
    h = await startApiTestHarness('pglite');
  });
  after(async () => {
    await h?.close();
  });

  it('docs/schema.graphql is what the code generates (run `node dist/schema-cli.js write`)', async () => {
    const generated = printSchemaSdl(h.controlPlane.app.get(GraphQLSchemaHost).schema);
    const committed = await readFile(committedSchemaPath(), 'utf8');
    assert.equal(committed, generated);
  });

  it('GET /explorer serves the explorer, with nothing loaded from other hosts', async () => {
    const response = await fetch(h.controlPlane.url + '/explorer');
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^text\/html/);
    assert.match(response.headers.get('content-security-policy') ?? '', /default-src 'none'/);
    const html = await response.text();
    assert.ok(html.includes("fetch('/graphql'"));
    assert.ok(html.includes('__schema'), 'lists the schema through introspection');
    assert.doesNotMatch(html, /(src|href)\s*=\s*["']?\s*(https?:)?\/\//i);
    assert.doesNotMatch(html, /https?:/i);
  });

  it('GET / without a built portal says how to build it and links to the explorer', async () => {
    const response = await fetch(h.controlPlane.url + '/');
    assert.equal(response.status, 200);
    const html = await response.text();
    assert.match(html, /npm run build/);
    assert.match(html, /href="\/explorer"/);
  });

  it('a browser opening the GraphQL URL is sent to the explorer, not given a CSRF error', async () => {
    const response = await fetch(h.controlPlane.graphqlUrl, {
      headers: { accept: 'text/html,application/xhtml+xml' },
      redirect: 'manual',
    });
    assert.equal(response.status, 302);
    assert.equal(response.headers.get('location'), '/explorer');
    const api = await fetch(`${h.controlPlane.graphqlUrl}?query=%7B__typename%7D`, {
      headers: { accept: 'application/json', 'apollo-require-preflight': 'true' },
    });
    assert.notEqual(api.status, 302, 'GET with a query still reaches Apollo');
  });

  it("Apollo's CDN landing page is off", async () => {
    const response = await fetch(h.controlPlane.graphqlUrl, { headers: { accept: 'text/html' } });
    const body = await response.text();
    assert.doesNotMatch(body, /cdn|apollographql\.com/i);
  });

  it('healthz answers without a token', async () => {
    const response = await fetch(`${h.controlPlane.url}/healthz`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { status: 'ok' });
  });

  it('metrics: Prometheus text with process metrics and the hosts-by-state gauge', async () => {
    const response = await fetch(`${h.controlPlane.url}/metrics`);
    assert.equal(response.status, 200);
    const text = await response.text();
    assert.match(text, /^# HELP gpushards_hosts /m);
    assert.match(text, /^gpushards_control_plane_process_cpu_user_seconds_total /m);
  });

  it('graphql-ws: a connection without a valid token is refused (4403), with one it is acknowledged', async () => {
    const connect = (payload: Record<string, unknown>) =>
      new Promise<{ ack: boolean; closeCode?: number }>((resolve, reject) => {
        const socket = new WebSocket(
          h.controlPlane.graphqlUrl.replace(/^http/, 'ws'),
          'graphql-transport-ws',
        );
        socket.on('open', () => socket.send(JSON.stringify({ type: 'connection_init', payload })));
        socket.on('message', (data) => {
          const message = JSON.parse(String(data)) as { type: string };
          if (message.type === 'connection_ack') {
            socket.close();
            resolve({ ack: true });
          }
        });
        socket.on('close', (code) => resolve({ ack: false, closeCode: code }));
        socket.on('error', reject);
      });
    assert.deepEqual(await connect({}), { ack: false, closeCode: 4403 });
    assert.deepEqual(await connect({ Authorization: 'Bearer gps_' + 'x'.repeat(43) }), {
      ack: false,
      closeCode: 4403,
    });
    assert.deepEqual(await connect({ Authorization: `Bearer ${h.adminToken}` }), { ack: true });
  });

  it('request errors (syntax, unknown fields) keep their GraphQL codes and carry no stack', async () => {
    const syntax = await h.graphql('{ me { ');
    assert.equal(syntax.errors?.[0]?.extensions?.code, 'GRAPHQL_PARSE_FAILED');
    const unknown = await h.graphql('{ nothingHere }');
    assert.equal(unknown.errors?.[0]?.extensions?.code, 'GRAPHQL_VALIDATION_FAILED');
    assert.doesNotMatch(JSON.stringify([syntax, unknown]), /stacktrace|\.js:\d+/);
  });
});

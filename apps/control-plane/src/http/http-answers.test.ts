import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import { JSON_BODY_LIMIT_BYTES } from './http-adapter.js';

/**
 * The HTTP answers clients and operators rely on, whatever serves HTTP underneath (Fastify now,
 * express before): status codes, content types, the body limit, routing leniency.
 */

const ME = JSON.stringify({ query: '{ me { id role } }' });

interface RawAnswer {
  readonly status: number;
  readonly headers: string;
  readonly body: string;
}

/** One request written as-is on a socket: for what fetch will not send (odd Host, HTTP/1.0). */
function rawRequest(url: string, request: string): Promise<RawAnswer> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', reject);
    socket.on('end', () => {
      const [head = '', ...rest] = text.split('\r\n\r\n');
      resolve({
        status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0),
        headers: head,
        body: rest.join('\r\n\r\n'),
      });
    });
    socket.write(request);
  });
}

describe('HTTP answers', () => {
  let h: ApiTestHarness;
  let url: string;
  let graphqlUrl: string;
  let auth: { authorization: string };
  before(async () => {
    h = await startApiTestHarness('pglite');
    url = h.controlPlane.url;
    graphqlUrl = h.controlPlane.graphqlUrl;
    auth = { authorization: `Bearer ${h.adminToken}` };
  });
  after(async () => {
    await h?.close();
  });

  const post = (body: string, headers: Record<string, string>, path = '/graphql') =>
    fetch(url + path, { method: 'POST', headers, body });

  it('/healthz: 200 JSON', async () => {
    const response = await fetch(`${url}/healthz`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^application\/json; charset=utf-8$/);
    assert.deepEqual(await response.json(), { status: 'ok' });
  });

  it('/readyz: 200 JSON when the database is migrated', async () => {
    const response = await fetch(`${url}/readyz`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
    assert.deepEqual(await response.json(), { status: 'ready' });
  });

  it('/metrics: Prometheus text format 0.0.4', async () => {
    const response = await fetch(`${url}/metrics`);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
    assert.match(await response.text(), /^# TYPE gpushards_hosts gauge$/m);
  });

  it('GET /: the explorer page as HTML', async () => {
    const response = await fetch(`${url}/`);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.equal(response.headers.get('cache-control'), 'no-store');
    assert.match(await response.text(), /^<!doctype html>/i);
  });

  for (const contentType of [
    'application/json',
    'application/json; charset=utf-8',
    'application/json;charset=UTF-8',
    'Application/JSON',
  ]) {
    it(`POST /graphql with content-type "${contentType}"`, async () => {
      const response = await post(ME, { 'content-type': contentType, ...auth });
      assert.equal(response.status, 200);
      assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
      const body = (await response.json()) as { data: { me: { role: string } } };
      assert.equal(body.data.me.role, 'ADMIN');
    });
  }

  it('a charset other than UTF-8: 415', async () => {
    const response = await post(ME, {
      'content-type': 'application/json; charset=latin1',
      ...auth,
    });
    assert.equal(response.status, 415);
  });

  it('invalid JSON: 400 with the parser message', async () => {
    const response = await post('{"query": ', { 'content-type': 'application/json', ...auth });
    assert.equal(response.status, 400);
    const body = (await response.json()) as { message: string; statusCode: number };
    assert.equal(body.statusCode, 400);
    assert.match(body.message, /JSON/);
  });

  it("an empty JSON body: Apollo's 400 BAD_REQUEST", async () => {
    const response = await post('', { 'content-type': 'application/json', ...auth });
    assert.equal(response.status, 400);
    const body = (await response.json()) as { errors: { extensions: { code: string } }[] };
    assert.equal(body.errors[0]?.extensions.code, 'BAD_REQUEST');
  });

  it("another content type is not read: Apollo's 400, not a 415", async () => {
    for (const contentType of ['text/plain', 'application/x-www-form-urlencoded']) {
      const response = await post(ME, { 'content-type': contentType, ...auth });
      assert.equal(response.status, 400, contentType);
      const body = (await response.json()) as { errors: { extensions: { code: string } }[] };
      assert.equal(body.errors[0]?.extensions.code, 'BAD_REQUEST', contentType);
    }
  });

  it('no token: a GraphQL error UNAUTHENTICATED', async () => {
    const response = await post(ME, { 'content-type': 'application/json' });
    assert.equal(response.status, 200);
    const body = (await response.json()) as {
      data: null;
      errors: { extensions: { code: string } }[];
    };
    assert.equal(body.data, null);
    assert.equal(body.errors[0]?.extensions.code, 'UNAUTHENTICATED');
  });

  it('a body just under the limit (256 KiB) is parsed: the oversized field gets BAD_USER_INPUT', async () => {
    const query = 'mutation ($name: String!) { createTeam(name: $name) { id } }';
    const name = 'n'.repeat(JSON_BODY_LIMIT_BYTES - 200);
    const response = await post(JSON.stringify({ query, variables: { name } }), {
      'content-type': 'application/json',
      ...auth,
    });
    assert.equal(response.status, 200);
    const body = (await response.json()) as { errors: { extensions: { code: string } }[] };
    assert.equal(body.errors[0]?.extensions.code, 'BAD_USER_INPUT');
  });

  it('a body over the limit: 413, refused by its length', async () => {
    const padding = 'p'.repeat(JSON_BODY_LIMIT_BYTES);
    const response = await post(JSON.stringify({ query: '{ me { id } }', padding }), {
      'content-type': 'application/json',
      ...auth,
    });
    assert.equal(response.status, 413);
    assert.equal(((await response.json()) as { statusCode: number }).statusCode, 413);
  });

  it('an unknown path, or a method a route does not have: 404 JSON', async () => {
    for (const [method, path] of [
      ['GET', '/nothing-here'],
      ['POST', '/healthz'],
    ] as const) {
      const response = await fetch(url + path, { method });
      assert.equal(response.status, 404, `${method} ${path}`);
      assert.deepEqual(await response.json(), {
        statusCode: 404,
        error: 'Not Found',
        message: `Cannot ${method} ${path}`,
      });
    }
  });

  it('PUT /graphql: 405 with Allow: GET, POST', async () => {
    const response = await fetch(graphqlUrl, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', ...auth },
      body: ME,
    });
    assert.equal(response.status, 405);
    assert.equal(response.headers.get('allow'), 'GET, POST');
  });

  it('paths are case-insensitive and a trailing slash is ignored', async () => {
    for (const path of ['/GRAPHQL', '/GraphQL/', '/graphql/']) {
      const response = await post(ME, { 'content-type': 'application/json', ...auth }, path);
      assert.equal(response.status, 200, path);
      assert.ok(((await response.json()) as { data?: unknown }).data, path);
    }
    assert.equal((await fetch(`${url}/HEALTHZ/`)).status, 200);
  });

  it('a Host header that is no host name, or none (HTTP/1.0), is ignored as express did', async () => {
    const request = (line: string, host: string | undefined) =>
      `${line}\r\n${host === undefined ? '' : `Host: ${host}\r\n`}` +
      `Content-Type: application/json\r\nAuthorization: ${auth.authorization}\r\n` +
      `Content-Length: ${Buffer.byteLength(ME)}\r\nConnection: close\r\n\r\n${ME}`;
    for (const [line, host] of [
      ['POST /graphql HTTP/1.1', 'not a host'],
      ['POST /graphql HTTP/1.1', '[::1'],
      ['POST /graphql HTTP/1.0', undefined],
    ] as const) {
      const answer = await rawRequest(url, request(line, host));
      assert.equal(answer.status, 200, `${line} with Host ${host}: ${answer.body}`);
      assert.match(answer.body, /"role":"ADMIN"/);
    }
  });

  it("keeps Node's connection timeouts: keep-alive 5 s, a request 300 s", () => {
    const server = h.controlPlane.app.getHttpServer() as Server;
    assert.equal(server.keepAliveTimeout, 5_000);
    assert.equal(server.requestTimeout, 300_000);
  });
});

// The load generator of create-shard.mjs, in its own process (forked; talks over IPC) so that
// its CPU is measured apart from the server's. Keep-alive HTTP/1.1 over plain sockets: one
// request in flight per connection, requests written as prepared bytes and answers framed by
// Content-Length (or chunked). node:http's client costs 0.35–0.6 ms of CPU per request here,
// which on two cores would be measured as the system's limit; this costs about 0.05 ms.
import net from 'node:net';
import { performance } from 'node:perf_hooks';

const CREATE = `mutation ($input: CreateShardInput!) { createShard(input: $input) { id hostId } }`;
const ME = '{ me { id } }';
const HEADER_END = Buffer.from('\r\n\r\n');

let sequence = 0;

function requestBytes(url, body, token, keepAlive) {
  const payload = Buffer.from(JSON.stringify(body));
  const head =
    `POST ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\n` +
    `Content-Type: application/json\r\nAuthorization: Bearer ${token}\r\n` +
    `Content-Length: ${payload.length}\r\nConnection: ${keepAlive ? 'keep-alive' : 'close'}\r\n\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), payload]);
}

/** Where one HTTP response ends in `buffer`, or -1 while it is incomplete. */
function responseEnd(buffer) {
  const headerEnd = buffer.indexOf(HEADER_END);
  if (headerEnd < 0) return -1;
  const head = buffer.subarray(0, headerEnd).toString('latin1');
  const bodyStart = headerEnd + 4;
  const length = /\r\ncontent-length: *(\d+)/i.exec(head);
  if (length) {
    const end = bodyStart + Number(length[1]);
    return buffer.length >= end ? end : -1;
  }
  if (!/\r\ntransfer-encoding: *chunked/i.test(head)) {
    throw new Error(`response without a length: ${head.split('\r\n')[0]}`);
  }
  let at = bodyStart;
  for (;;) {
    const lineEnd = buffer.indexOf('\r\n', at);
    if (lineEnd < 0) return -1;
    const size = parseInt(buffer.subarray(at, lineEnd).toString('latin1'), 16);
    at = lineEnd + 2 + size + 2;
    if (buffer.length < at) return -1;
    if (size === 0) return at;
  }
}

/** The body of a complete response (chunked bodies joined). */
function responseBody(response) {
  const headerEnd = response.indexOf(HEADER_END);
  const head = response.subarray(0, headerEnd).toString('latin1');
  let body = response.subarray(headerEnd + 4);
  if (/\r\ntransfer-encoding: *chunked/i.test(head)) {
    const parts = [];
    let at = 0;
    for (;;) {
      const lineEnd = body.indexOf('\r\n', at);
      const size = parseInt(body.subarray(at, lineEnd).toString('latin1'), 16);
      if (size === 0) break;
      parts.push(body.subarray(lineEnd + 2, lineEnd + 2 + size));
      at = lineEnd + 2 + size + 2;
    }
    body = Buffer.concat(parts);
  }
  return body.toString('utf8');
}

/** A connection that carries one request at a time. */
class Connection {
  constructor(url, keepAlive) {
    this.url = url;
    this.keepAlive = keepAlive;
    this.buffer = Buffer.alloc(0);
    this.waiting = undefined;
    this.socket = net.connect(Number(url.port), url.hostname);
    this.socket.setNoDelay(true);
    this.socket.on('data', (chunk) => this.received(chunk));
    this.socket.on('error', (error) => this.failed(error));
    this.socket.on('close', () =>
      this.failed(Object.assign(new Error('closed'), { code: 'CLOSED' })),
    );
    this.closed = false;
  }

  send(bytes) {
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
      this.socket.write(bytes);
    });
  }

  received(chunk) {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    let end;
    try {
      end = responseEnd(this.buffer);
    } catch (error) {
      this.failed(error);
      return;
    }
    if (end < 0) return;
    const response = this.buffer.subarray(0, end);
    this.buffer = this.buffer.subarray(end);
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting?.resolve(responseBody(response));
  }

  failed(error) {
    this.closed = true;
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting?.reject(error);
  }

  close() {
    this.socket.end();
  }
}

function bodyOf(operation, n) {
  return operation === 'me'
    ? { query: ME, variables: {} }
    : {
        query: CREATE,
        variables: {
          input: {
            name: `s-${process.pid}-${n}`,
            image: 'ghcr.io/bench/worker:1',
            memoryPerGpu: '1g',
            queue: false,
          },
        },
      };
}

/** Idle keep-alive connections per URL; a request takes one or opens one. */
class Pool {
  constructor(keepAlive) {
    this.keepAlive = keepAlive;
    this.idle = new Map();
  }

  async one(urls, tokens, operation) {
    const n = sequence++;
    const url = urls[n % urls.length];
    const bytes = requestBytes(
      url,
      bodyOf(operation, n),
      tokens[n % tokens.length],
      this.keepAlive,
    );
    const idle = this.idle.get(url.href) ?? [];
    this.idle.set(url.href, idle);
    // The server closes connections idle past its keep-alive timeout (5 s): skip those.
    let connection = idle.pop();
    while (connection?.closed) connection = idle.pop();
    connection ??= new Connection(url, this.keepAlive);
    const started = performance.now();
    try {
      const answer = JSON.parse(await connection.send(bytes));
      if (this.keepAlive && !connection.closed) idle.push(connection);
      else connection.close();
      return {
        ms: performance.now() - started,
        ok: !answer.errors,
        code: answer.errors?.[0]?.extensions?.code,
      };
    } catch (error) {
      connection.close();
      return { ms: performance.now() - started, ok: false, code: error.code ?? 'CLIENT' };
    }
  }

  close() {
    for (const connections of this.idle.values()) for (const c of connections) c.close();
    this.idle.clear();
  }
}

async function closedLoop(pool, { urls, tokens, seconds, concurrency, operation }) {
  const results = [];
  const deadline = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) results.push(await pool.one(urls, tokens, operation));
    }),
  );
  return { results, elapsed: (performance.now() - started) / 1000 };
}

async function openLoop(pool, { urls, tokens, seconds, rate, operation }) {
  const pending = [];
  const started = performance.now();
  const total = Math.round(seconds * rate);
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    pending.push(pool.one(urls, tokens, operation));
  }
  const results = await Promise.all(pending);
  return { results, elapsed: (performance.now() - started) / 1000 };
}

process.on('message', async (job) => {
  const pool = new Pool(job.keepAlive !== false);
  const urls = job.urls.map((url) => new URL(url));
  const cpu = process.cpuUsage();
  const run =
    job.rate === undefined ? closedLoop(pool, { ...job, urls }) : openLoop(pool, { ...job, urls });
  const { results, elapsed } = await run;
  const used = process.cpuUsage(cpu);
  pool.close();
  process.send({
    ms: results.map((r) => (r.ok ? r.ms : -1)),
    failures: results.filter((r) => !r.ok).map((r) => r.code ?? 'UNKNOWN'),
    elapsed,
    cpuMs: (used.user + used.system) / 1000,
  });
});

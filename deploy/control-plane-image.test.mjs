// The control plane's image, built and run: deploy/control-plane/Dockerfile on a stand-in base
// (local-node-image.mjs: this machine's node and npm, no Docker Hub), from this checkout's build
// (npm run build first). The container starts on an embedded database (PGlite, in its data
// volume), answers /healthz, /readyz and a GraphQL query with its first admin token, and holds
// no test code. Needs Docker and the npm registry (the Dockerfile's `npm ci`): without either
// it fails, saying which.
//   node --test deploy/control-plane-image.test.mjs
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { buildLocalNodeImage } from './control-plane/local-node-image.mjs';
import { isTestCode } from './test-code.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const REGISTRY = 'https://registry.npmjs.org/';
const run = promisify(execFile);

async function docker(...args) {
  const { stdout } = await run('docker', args, { cwd: root, maxBuffer: 64 * 2 ** 20 });
  return stdout.trim();
}

/** Every file under the image's working folder but node_modules, as paths relative to it. */
const LIST_FILES = `
const { readdirSync } = require('node:fs');
const { join, relative } = require('node:path');
const out = [];
const walk = (dir) => {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name === 'node_modules') continue;
    if (e.isDirectory()) walk(join(dir, e.name));
    else out.push(relative(process.cwd(), join(dir, e.name)));
  }
};
walk(process.cwd());
process.stdout.write(JSON.stringify(out));
`;

/** Resolves with the control plane's URL line once the container logs it; rejects if it ends. */
function listening(container) {
  return new Promise((found, failed) => {
    const logs = spawn('docker', ['logs', '--follow', container], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    logs.stderr.on('data', (chunk) => (output += chunk));
    createInterface({ input: logs.stdout }).on('line', (line) => {
      output += `${line}\n`;
      if (line.includes('control plane listening')) {
        logs.kill();
        found();
      }
    });
    logs.once('exit', () =>
      failed(new Error(`the container stopped before listening:\n${output}`)),
    );
  });
}

test('the control plane image builds on a local base, starts, serves and holds no test code', async (t) => {
  assert.ok(
    existsSync(join(root, 'apps/control-plane/dist/main.js')),
    'apps/control-plane/dist/main.js is missing: run `npm run build` first',
  );
  await docker('info', '--format', '{{.ServerVersion}}').catch((error) => {
    throw new Error(`this test needs a running Docker engine: ${error.stderr || error.message}`);
  });
  const registry = await fetch(`${REGISTRY}-/ping`).catch((error) => error);
  assert.ok(
    registry.ok,
    `this test needs the npm registry (${REGISTRY}) for the image's npm ci: ${registry.cause?.message ?? registry.message ?? registry.status}`,
  );

  const suffix = randomBytes(4).toString('hex');
  const base = `gpushards-test/node-local:${suffix}`;
  const image = `gpushards-test/control-plane:${suffix}`;
  // Removed in order once the test ends: the container (and its data volume), then the image
  // with its intermediate layers (or, when the build failed, the last layer it made), then the
  // base. An image still used by a container or by a child image would stay behind.
  let container;
  let topLayer;
  t.after(async () => {
    if (container) await docker('rm', '--force', '--volumes', container).catch(() => {});
    if (topLayer) await docker('rmi', topLayer).catch(() => {});
    await docker('rmi', base).catch(() => {});
  });
  buildLocalNodeImage(base);
  const build = await run(
    'docker',
    [
      'build',
      '--force-rm',
      '--file',
      'deploy/control-plane/Dockerfile',
      '--build-arg',
      `NODE_IMAGE=${base}`,
      '--tag',
      image,
      '.',
    ],
    { cwd: root, maxBuffer: 64 * 2 ** 20 },
  ).catch((error) => error);
  topLayer = build.stdout
    ?.match(/^ ---> ([0-9a-f]{12})$/gm)
    ?.pop()
    ?.slice(6);
  if (build instanceof Error) {
    throw new Error(
      `docker build failed (its npm ci reaches ${REGISTRY} from a build container on Docker's ` +
        `default network):\n${String(build.stdout).slice(-4000)}\n${build.stderr}`,
    );
  }
  topLayer = image;

  container = await docker(
    'run',
    '--detach',
    '--env',
    'GPUSHARDS_NO_AGENTS=true',
    '--publish',
    '127.0.0.1::4000',
    image,
  );
  await listening(container);
  const port = (await docker('port', container, '4000/tcp')).split('\n')[0];
  const url = `http://${port}`;
  assert.equal((await fetch(`${url}/healthz`)).status, 200);
  assert.equal((await fetch(`${url}/readyz`)).status, 200);
  // The team portal at /, as npm start serves it.
  const portal = await fetch(`${url}/`, { headers: { accept: 'text/html' } });
  assert.equal(portal.status, 200);
  const page = await portal.text();
  assert.match(page, /<title>GPU Shards<\/title>/);
  assert.match(page, /<script type="module"[^>]* src="\/assets\/[^"]+\.js"/);

  const token = await docker(
    'exec',
    container,
    'node',
    '-e',
    "process.stdout.write(require('node:fs').readFileSync('/var/lib/gpushards/admin-token', 'utf8'))",
  );
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: '{ me { role } shards(first: 1) { edges { cursor } } }' }),
  });
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  assert.deepEqual(body, { data: { me: { role: 'ADMIN' }, shards: { edges: [] } } });

  const files = JSON.parse(await docker('exec', container, 'node', '-e', LIST_FILES));
  assert.ok(files.includes('apps/control-plane/dist/main.js'), files.join('\n'));
  assert.ok(files.includes('prisma/schema.prisma'), files.join('\n'));
  assert.ok(files.includes('apps/portal/dist/index.html'), files.join('\n'));
  assert.deepEqual(files.filter(isTestCode), []);
  // Only the control plane's build and the portal's bundle: no other app's code, no sources.
  assert.deepEqual(
    files.filter(
      (path) =>
        /(^|\/)src\//.test(path) ||
        /^apps\/(?!control-plane\/|portal\/dist\/)[^/]+\/(?!package\.json$)/.test(path),
    ),
    [],
  );
});

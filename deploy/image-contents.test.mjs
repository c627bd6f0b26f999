// What the control-plane image ships (deploy/control-plane/Dockerfile copies the dist folders
// through the repository's .dockerignore): no test code (test-code.mjs: by name, and by what each
// module imports), and every module it ships can load its
// relative imports, and the image's files alone start a control plane that serves. Needs a build
// first (npm run build); control-plane-image.test.mjs builds and runs the image itself.
//   node --test deploy/
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { createInterface } from 'node:readline';
import { dirname, join, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { missingImports, testCodeAmong } from './test-code.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const SHIPPED_DIST = [
  'libs/limits/dist',
  'libs/protocol/dist',
  'libs/link/dist',
  'apps/control-plane/dist',
];

/** .dockerignore's exclusions below the copied dist folders, as predicates. */
function excludedByDockerignore() {
  const lines = readFileSync(join(root, '.dockerignore'), 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line.startsWith('**/'));
  return lines.map((pattern) => {
    const rest = pattern.slice(3);
    if (rest.endsWith('/')) {
      const folder = `/${rest}`;
      return (path) => `/${path}`.includes(folder);
    }
    const suffix = rest.replace(/^\*/, '');
    return (path) => path.endsWith(suffix);
  });
}

function filesUnder(folder) {
  return readdirSync(join(root, folder), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(root, join(entry.parentPath, entry.name)));
}

function shippedFiles() {
  const excluded = excludedByDockerignore();
  return SHIPPED_DIST.flatMap(filesUnder).filter((path) => !excluded.some((x) => x(path)));
}

test('the image ships no test code, by name or by what a module imports', () => {
  const shipped = shippedFiles();
  assert.ok(shipped.some((path) => path === 'apps/control-plane/dist/main.js'));
  assert.deepEqual(testCodeAmong(root, shipped), []);
});

test('every shipped module finds its relative imports in the image', () => {
  assert.deepEqual(missingImports(root, shippedFiles()), []);
});

/**
 * The image's files alone (what the Dockerfile copies, through its .dockerignore) start and
 * serve: staged in an empty folder with `node_modules` pointing at this checkout's packages
 * (the image installs the production ones; npm cannot reach a registry here) and the workspace
 * libraries pointing at the staged copies, `node apps/control-plane/dist/main.js` as the
 * image's CMD runs it answers /healthz, /readyz and a GraphQL query with the first admin token.
 */
test('the files the image ships start a control plane that serves', async (t) => {
  const stage = mkdtempSync(join(tmpdir(), 'gpushards-image-'));
  t.after(() => rmSync(stage, { recursive: true, force: true }));
  const copied = [...shippedFiles(), 'package.json', ...filesUnder('prisma')];
  for (const path of copied) {
    mkdirSync(join(stage, dirname(path)), { recursive: true });
    copyFileSync(join(root, path), join(stage, path));
  }
  for (const lib of ['limits', 'protocol', 'link']) {
    copyFileSync(join(root, `libs/${lib}/package.json`), join(stage, `libs/${lib}/package.json`));
  }
  copyFileSync(
    join(root, 'apps/control-plane/package.json'),
    join(stage, 'apps/control-plane/package.json'),
  );
  mkdirSync(join(stage, 'node_modules/@gpushards'), { recursive: true });
  for (const entry of readdirSync(join(root, 'node_modules'))) {
    if (entry === '@gpushards' || entry === '.bin') continue;
    symlinkSync(join(root, 'node_modules', entry), join(stage, 'node_modules', entry));
  }
  symlinkSync(join(stage, 'libs/limits'), join(stage, 'node_modules/@gpushards/limits'));
  symlinkSync(join(stage, 'libs/protocol'), join(stage, 'node_modules/@gpushards/protocol'));
  symlinkSync(join(stage, 'libs/link'), join(stage, 'node_modules/@gpushards/link'));
  symlinkSync(
    join(stage, 'apps/control-plane'),
    join(stage, 'node_modules/@gpushards/control-plane'),
  );

  const dataDir = join(stage, 'data');
  mkdirSync(dataDir);
  const child = spawn(process.execPath, ['apps/control-plane/dist/main.js'], {
    cwd: stage,
    env: {
      PATH: process.env.PATH,
      NODE_ENV: 'production',
      GPUSHARDS_HOST: '127.0.0.1',
      GPUSHARDS_PORT: '0',
      GPUSHARDS_DATA_DIR: dataDir,
      GPUSHARDS_NO_AGENTS: 'true',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise((done) => child.once('exit', done));
  t.after(async () => {
    child.kill('SIGTERM');
    await exited;
  });
  const url = await new Promise((found, failed) => {
    child.once('exit', (code) => failed(new Error(`main.js exited with ${code}: ${stderr}`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (line.includes('control plane listening')) found(JSON.parse(line).url);
    });
  });
  assert.equal((await fetch(`${url}/healthz`)).status, 200);
  assert.equal((await fetch(`${url}/readyz`)).status, 200);
  const token = readFileSync(join(dataDir, 'admin-token'), 'utf8').trim();
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: '{ me { role } shards(first: 1) { edges { cursor } } }' }),
  });
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  assert.deepEqual(body, { data: { me: { role: 'ADMIN' }, shards: { edges: [] } } });
});

// What the control-plane image ships (deploy/control-plane/Dockerfile copies the dist folders
// through Dockerfile.dockerignore): no test code, and every module it ships can load its
// relative imports. Needs a build first (npm run build); the image itself cannot be built here.
//   node --test deploy/
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const SHIPPED_DIST = ['libs/limits/dist', 'libs/protocol/dist', 'apps/control-plane/dist'];

/** Dockerfile.dockerignore's exclusions below the copied dist folders, as predicates. */
function excludedByDockerignore() {
  const lines = readFileSync(join(root, 'deploy/control-plane/Dockerfile.dockerignore'), 'utf8')
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

test('the image ships no test code', () => {
  const shipped = shippedFiles();
  assert.ok(shipped.some((path) => path === 'apps/control-plane/dist/main.js'));
  const testCode = shipped.filter(
    (path) =>
      /(^|\/)testing\//.test(path) ||
      /\.test\.(js|d\.ts|js\.map)$/.test(path) ||
      /(^|\/)(test-|fake-|.*-fixtures\.|.*-harness\.)/.test(path.split('/').pop()),
  );
  assert.deepEqual(testCode, []);
});

test('every shipped module finds its relative imports in the image', () => {
  const shipped = new Set(shippedFiles());
  const missing = [];
  for (const path of shipped) {
    if (!path.endsWith('.js')) continue;
    const text = readFileSync(join(root, path), 'utf8');
    for (const [, specifier] of text.matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)) {
      const target = relative(root, resolve(join(root, dirname(path)), specifier));
      if (!shipped.has(target)) missing.push(`${path} → ${specifier}`);
    }
  }
  assert.deepEqual(missing, []);
});

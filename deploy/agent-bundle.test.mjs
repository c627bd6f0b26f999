// The agent's installable build (deploy/agent/bundle.mjs): no test code, every module finds its
// relative imports, and its files alone load the agent (main.js gets as far as reading its
// configuration). Needs a build first (npm run build).
//   node --test deploy/agent-bundle.test.mjs
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { writeBundle } from './agent/bundle.mjs';
import { isTestCode, missingImports, testCodeAmong } from './test-code.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

test('the agent bundle holds the agent without test code, and its files alone load it', (t) => {
  const work = mkdtempSync(join(tmpdir(), 'gpushards-agent-bundle-test-'));
  t.after(() => rmSync(work, { recursive: true, force: true }));
  const archive = join(work, 'gpushards-agent.tar.gz');
  writeBundle(archive);

  const host = join(work, 'opt-gpushards');
  mkdirSync(host);
  execFileSync('tar', ['-xzf', archive, '-C', host]);
  const files = execFileSync('tar', ['-tzf', archive], { encoding: 'utf8' })
    .split('\n')
    .filter((line) => line !== '' && !line.endsWith('/'))
    .map((line) => line.replace(/^\.\//, ''));
  for (const expected of [
    'apps/agent/dist/main.js',
    'libs/limits/dist/index.js',
    'libs/protocol/dist/index.js',
    'libs/link/dist/index.js',
    'package-lock.json',
    'deploy/agent/gpushards-agent.service',
  ]) {
    assert.ok(files.includes(expected), `${expected} is not in the bundle`);
  }
  assert.deepEqual(files.filter(isTestCode), []);
  assert.deepEqual(testCodeAmong(host, files), []);
  assert.deepEqual(missingImports(host, files), []);
  assert.deepEqual(
    files.filter((path) => /^apps\/(?!agent\/|control-plane\/package\.json$)/.test(path)),
    [],
    'no other app',
  );

  // As installed: node_modules from this checkout (npm ci cannot reach a registry here), the
  // workspace libraries from the bundle.
  mkdirSync(join(host, 'node_modules/@gpushards'), { recursive: true });
  for (const entry of readdirSync(join(root, 'node_modules'))) {
    if (entry === '@gpushards' || entry === '.bin') continue;
    symlinkSync(join(root, 'node_modules', entry), join(host, 'node_modules', entry));
  }
  for (const lib of ['limits', 'protocol', 'link']) {
    symlinkSync(join(host, 'libs', lib), join(host, 'node_modules/@gpushards', lib));
  }
  const started = spawnSync(process.execPath, ['apps/agent/dist/main.js'], {
    cwd: host,
    encoding: 'utf8',
    timeout: 60_000,
    env: { PATH: process.env.PATH, GPUSHARDS_HEARTBEAT_SECONDS: 'often' },
  });
  // Every module loaded (a missing one fails before main runs): the agent read its settings.
  assert.equal(started.status, 1, started.stderr);
  assert.match(started.stderr, /^gpushards agent: invalid agent configuration:\n/);
  assert.match(started.stderr, /^ {2}GPUSHARDS_HEARTBEAT_SECONDS must be .*, got "often"$/m);
});

// `npm start` on a Node.js older than package.json's engines: node-version.mjs, which the start
// script runs first, says so and exits 1 before anything is built or started. The version is
// faked for the process under test (a module preloaded through NODE_OPTIONS sets
// process.version), not a second Node installed.
//   node --test scripts/one-box/node-version.test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { REPO_ROOT } from './paths.mjs';

const packageJson = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8'));

/** NODE_OPTIONS that make every Node process it reaches report `version`. */
function claiming(version) {
  const fake = `Object.defineProperty(process, 'version', { value: 'v${version}' });`;
  return `--import=data:text/javascript,${encodeURIComponent(fake)}`;
}

function run(command, args, version) {
  return spawnSync(command, args, {
    cwd: REPO_ROOT,
    encoding: 'utf8',
    timeout: 60_000,
    // Were the check skipped, start.mjs would stop at its configuration, not serve.
    env: { ...process.env, NODE_OPTIONS: claiming(version), GPUSHARDS_PORT: 'not-a-port' },
  });
}

test('the engines range is the one the check reads', () => {
  assert.equal(packageJson.engines.node, '>=20.19');
});

for (const version of ['18.19.0', '20.18.3', '20.0.0']) {
  test(`Node.js ${version} is refused with what to do, exit 1`, () => {
    const result = run(process.execPath, ['scripts/one-box/node-version.mjs'], version);
    assert.equal(result.status, 1, result.stderr);
    assert.match(
      result.stderr,
      new RegExp(
        `^gpushards: npm start needs Node\\.js 20\\.19 or newer; this is Node\\.js ${version.replaceAll('.', '\\.')} `,
      ),
    );
    assert.match(result.stderr, /README\.md, "Prerequisites"/);
    assert.doesNotMatch(result.stderr, /\n\s+at /, 'a stack trace');
  });
}

for (const version of ['20.19.0', '20.20.2', '22.0.0']) {
  test(`Node.js ${version} passes, silently`, () => {
    const result = run(process.execPath, ['scripts/one-box/node-version.mjs'], version);
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stdout + result.stderr, '');
  });
}

test("package.json's start script checks first: on Node.js 18 nothing is built or started", () => {
  const result = run('sh', ['-c', packageJson.scripts.start], '18.19.0');
  assert.equal(result.status, 1, `${result.stdout}${result.stderr}`);
  assert.match(
    result.stderr,
    /npm start needs Node\.js 20\.19 or newer; this is Node\.js 18\.19\.0/,
  );
  assert.equal(result.stdout, '', 'the start script ran');
});

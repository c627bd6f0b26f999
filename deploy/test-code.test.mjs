// test-code.mjs finds test code by what it imports, not only by its name: on a made-up package.
//   node --test deploy/test-code.test.mjs
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';

import { importsOf, isTestCode, missingImports, testCodeAmong } from './test-code.mjs';

test('importsOf: static, re-exported, bare and dynamic imports as tsc writes them; not strings', () => {
  const text = [
    "import { a } from './a.js';",
    'import {',
    '  b,',
    '  c,',
    "} from 'fast-check';",
    "export * from './b.js';",
    "import 'reflect-metadata';",
    "const m = await import('node:test');",
    'const text = \'taken from "somewhere"\';',
  ].join('\n');
  assert.deepEqual(importsOf(text).sort(), [
    './a.js',
    './b.js',
    'fast-check',
    'node:test',
    'reflect-metadata',
  ]);
});

test('by name: testing/ folders, *.test.*, fixtures, harnesses, arbitraries; not the fake driver', () => {
  for (const path of [
    'apps/x/dist/testing/docker.js',
    'libs/x/dist/a.test.js',
    'libs/x/dist/fixtures.js',
    'libs/x/dist/api-harness.d.ts',
    'libs/x/dist/placement-arbitraries.js',
  ]) {
    assert.equal(isTestCode(path), true, path);
  }
  assert.equal(isTestCode('apps/agent/dist/gpus/fake-driver.js'), false);
});

test('by what it imports: node:test, a package its package.json does not depend on, test code', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'gpushards-test-code-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const files = {
    'pkg/package.json': JSON.stringify({ dependencies: { zod: '4' } }),
    'pkg/dist/index.js':
      "import { z } from 'zod';\nimport { plan } from './plan.js';\nimport 'node:fs';\n",
    'pkg/dist/plan.js':
      "import { readFileSync } from 'node:fs';\nimport { Other } from '@gpushards/other';\n",
    'pkg/dist/generators.js': "import fc from 'fast-check';\n",
    'pkg/dist/runner.js': "import { test } from 'node:test';\n",
    'pkg/dist/uses-generators.js': "import { shard } from './generators.js';\n",
    'pkg/dist/uses-testing.js': "import { docker } from './testing/docker.js';\n",
  };
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  const shipped = Object.keys(files).filter((path) => path.endsWith('.js'));
  assert.deepEqual(testCodeAmong(root, shipped), [
    'pkg/dist/generators.js: imports fast-check, which its package does not depend on',
    'pkg/dist/runner.js: imports node:test, which its package does not depend on',
    'pkg/dist/uses-generators.js: imports pkg/dist/generators.js, test code',
    'pkg/dist/uses-testing.js: imports pkg/dist/testing/docker.js, test code',
  ]);
});

test('a bundle is read through its manifest: the modules it holds and the packages it imports', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'gpushards-test-code-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const manifest = (modules, imports) => JSON.stringify({ modules, imports });
  const files = {
    'pkg/package.json': JSON.stringify({ dependencies: { zod: '4' } }),
    'pkg/dist/plan.js': "import { z } from 'zod';\n",
    // The bundles' text shows none of this: a bundler's output, with strings that look like imports.
    'pkg/dist/main.js': 'const s = "import(\'kafkajs\')";\n',
    'pkg/dist/main.bundle.json': manifest(
      ['pkg/dist/main.js', 'pkg/dist/plan.js'],
      ['zod', 'node:fs'],
    ),
    'pkg/dist/with-testing.js': '',
    'pkg/dist/with-testing.bundle.json': manifest(
      ['pkg/dist/plan.js', 'pkg/dist/testing/pg.js'],
      [],
    ),
    'pkg/dist/with-fast-check.js': '',
    'pkg/dist/with-fast-check.bundle.json': manifest(['pkg/dist/plan.js'], ['fast-check']),
  };
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  const shipped = Object.keys(files).filter((path) => path.endsWith('.js'));
  assert.deepEqual(testCodeAmong(root, shipped), [
    'pkg/dist/with-fast-check.js: imports fast-check, which its package does not depend on',
    'pkg/dist/with-testing.js: imports pkg/dist/testing/pg.js, test code',
  ]);
  assert.deepEqual(missingImports(root, shipped), []);
});

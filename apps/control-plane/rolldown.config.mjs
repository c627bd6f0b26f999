// `node dist/main.js`, the control plane as a service (the image's CMD), is one bundled file:
// tsc's dist/main.js and every module it reaches, the workspace libraries and third-party
// packages included, bundled over tsc's output in place. Loading about 800 modules one by one
// (ESM resolution, a file read and a compile each) was half of a restart's CPU; one file is
// read and compiled once (bench/README.md, "Queue": restart to ready).
//
// tsc's output is bundled, not src/: NestJS and the code-first GraphQL schema read the
// decorator metadata tsc emits (design:paramtypes, design:type), which only tsc writes from
// the types. The rest of dist/ stays as tsc wrote it: the library entry (index.js, which the
// one box and the tests import), the migration and secrets CLIs.
//
// dist/main.bundle.json lists what went in (the repository's modules) and what the bundle still
// imports, for deploy/test-code.mjs: the image's check for test code reads it.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'rolldown';

import { isTestCode } from '../../deploy/test-code.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '../..');
const BANNER = "// Bundled by apps/control-plane/rolldown.config.mjs from tsc's dist/main.js.";
const ENTRY = join(here, 'dist/main.js');

if (readFileSync(ENTRY, 'utf8').startsWith(BANNER)) {
  throw new Error(`${ENTRY} is already the bundle: run tsc first (the build target does)`);
}

// Left to node_modules: packages that load files beside themselves at run time (WebAssembly,
// workers), and pg, which @prisma/adapter-pg imports too (one copy of its classes).
const EXTERNAL = [
  /^@prisma\//,
  /^prisma(\/|$)/,
  /^@electric-sql\/pglite(\/|$)/,
  'pglite-prisma-adapter',
  /^pino(\/|$)/,
  /^pg(\/|$)/,
];

// Not installed: NestJS, Apollo and ws require these only when configured to (inside
// try/catch, as from node_modules); the bundle keeps those calls as they are.
const OPTIONAL_PEERS = [
  '@apollo/gateway',
  '@apollo/subgraph',
  '@as-integrations/express5',
  '@fastify/multipart',
  '@fastify/static',
  '@fastify/view',
  '@nestjs/platform-express',
  '@nestjs/platform-socket.io',
  'amqp-connection-manager',
  'bufferutil',
  'class-transformer',
  'class-validator',
  'ioredis',
  'kafkajs',
  'mqtt',
  'ts-morph',
  'utf-8-validate',
];

const packageOf = (specifier) =>
  specifier
    .split('/')
    .slice(0, specifier.startsWith('@') ? 2 : 1)
    .join('/');

/** Refuses test code in the bundle and writes main.bundle.json. */
const manifest = {
  name: 'gpushards-bundle-manifest',
  generateBundle(_options, bundle) {
    const chunk = bundle['main.js'];
    const modules = chunk.moduleIds
      .filter((id) => !id.includes('/node_modules/') && !id.startsWith('\0'))
      .map((id) => relative(root, id))
      .sort();
    const testCode = modules.filter((path) => isTestCode(path));
    if (testCode.length > 0) this.error(`test code in the bundle: ${testCode.join(', ')}`);
    // (A dynamic import of a module bundled here names this file.)
    const imports = [...new Set([...chunk.imports, ...chunk.dynamicImports])]
      .filter((specifier) => specifier !== chunk.fileName)
      .filter((specifier) => !OPTIONAL_PEERS.includes(packageOf(specifier)))
      .sort();
    writeFileSync(
      join(here, 'dist/main.bundle.json'),
      `${JSON.stringify({ modules, imports, optional: OPTIONAL_PEERS }, null, 2)}\n`,
    );
  },
};

export default defineConfig({
  input: ENTRY,
  platform: 'node',
  external: [...EXTERNAL, ...OPTIONAL_PEERS.map((name) => new RegExp(`^${name}(/|$)`))],
  plugins: [manifest],
  output: {
    file: ENTRY,
    format: 'esm',
    codeSplitting: false,
    banner: BANNER,
    // NestJS and @nestjs/graphql name things after classes (GraphQL types, providers): the
    // bundle's renames for clashing top-level names must not show.
    keepNames: true,
    sourcemap: true,
  },
});

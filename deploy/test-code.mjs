// What counts as test code among shipped files (the control plane image's and the agent
// bundle's, relative to the repository root): by name, and by what a module imports. Used by
// image-contents.test.mjs (the files the Dockerfile copies), control-plane-image.test.mjs (the
// files a built image holds, by name) and agent-bundle.test.mjs (the agent's installable build).
import { existsSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, posix } from 'node:path';

/**
 * By name: testing/ folders, *.test.* files, test- modules, fixtures, harnesses and fast-check
 * arbitraries. (fake- is not: the agent's simulated GPUs, fake-driver.js, ship.)
 * @param {string} path a file's path, `/`-separated
 */
export function isTestCode(path) {
  const name = path.split('/').pop();
  return (
    /(^|\/)testing\//.test(path) ||
    /\.test\.(js|d\.ts|js\.map)$/.test(path) ||
    /^test-/.test(name) ||
    /^(.*-)?(fixtures|harness|arbitraries)\.(js|d\.ts|js\.map)$/.test(name)
  );
}

/** Node's own modules a shipped module may import: all but the test runner. */
const PRODUCTION_BUILTINS = new Set(
  builtinModules.flatMap((name) => [name, `node:${name}`]).filter((name) => !/test/.test(name)),
);

/**
 * The modules a compiled module imports: `import … from`, `export … from` and bare `import`
 * statements (each at the start of a line, as tsc writes them) and `import()` calls.
 */
export function importsOf(text) {
  const patterns = [
    /^\s*(?:import|export)\b[^;'"]*?\bfrom\s*(['"])([^'"\n]+)\1/gm,
    /^\s*import\s*(['"])([^'"\n]+)\1/gm,
    /\bimport\(\s*(['"])([^'"\n]+)\1\s*\)/g,
  ];
  return [...new Set(patterns.flatMap((pattern) => [...text.matchAll(pattern)].map((m) => m[2])))];
}

/**
 * A bundle (apps/control-plane/dist/main.js) beside its manifest (main.bundle.json, written by
 * the bundler): what it holds and what it still imports, for a file whose text no longer shows
 * its modules' imports. Undefined for a module as tsc writes it.
 * @param {string} root @param {string} path
 * @returns {{ modules: string[], imports: string[] } | undefined} repository paths, specifiers
 */
export function bundleManifest(root, path) {
  if (!path.endsWith('.js')) return undefined;
  const manifestPath = join(root, path.replace(/\.js$/, '.bundle.json'));
  if (!existsSync(manifestPath)) return undefined;
  const { modules, imports } = JSON.parse(readFileSync(manifestPath, 'utf8'));
  return { modules, imports };
}

/** The package a bare specifier names: "zod", "@nestjs/core" (not "@nestjs/core/x"). */
function packageOf(specifier) {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

/**
 * The production dependencies of the package a shipped file belongs to (the nearest
 * package.json above it, in the repository), and the workspace packages (@gpushards/*).
 */
function dependenciesFor(root) {
  const cache = new Map();
  return (path) => {
    let folder = dirname(path);
    while (folder !== '.' && folder !== '/') {
      if (cache.has(folder)) return cache.get(folder);
      try {
        const manifest = JSON.parse(readFileSync(join(root, folder, 'package.json'), 'utf8'));
        const allowed = new Set(Object.keys(manifest.dependencies ?? {}));
        cache.set(folder, allowed);
        return allowed;
      } catch (error) {
        if (error.code !== 'ENOENT') throw error;
      }
      folder = dirname(folder);
    }
    throw new Error(`${path}: no package.json above it`);
  };
}

/**
 * The shipped files that are test code: by name, or because a module imports what only tests
 * have (node:test, a package its own package.json does not list in `dependencies`, such as
 * fast-check or @nestjs/testing), or imports test code, transitively. Each with why.
 * @param {string} root the repository root
 * @param {string[]} files shipped paths relative to it
 * @returns {string[]} "path: why" lines
 */
export function testCodeAmong(root, files) {
  const shipped = new Set(files);
  const dependencies = dependenciesFor(root);
  const why = new Map();
  const relativeImports = new Map();
  for (const path of files) {
    if (isTestCode(path)) why.set(path, 'named as test code');
    if (!path.endsWith('.js')) continue;
    const bundle = bundleManifest(root, path);
    // A bundle holds its modules: any of them that is test code makes it test code.
    const imports = bundle?.imports ?? importsOf(readFileSync(join(root, path), 'utf8'));
    relativeImports.set(
      path,
      bundle?.modules ??
        imports
          .filter((specifier) => specifier.startsWith('.'))
          .map((specifier) => posix.join(posix.dirname(path), specifier)),
    );
    const testOnly = imports.find(
      (specifier) =>
        !specifier.startsWith('.') &&
        !PRODUCTION_BUILTINS.has(specifier) &&
        !packageOf(specifier).startsWith('@gpushards/') &&
        !dependencies(path).has(packageOf(specifier)),
    );
    if (testOnly !== undefined && !why.has(path)) {
      why.set(path, `imports ${testOnly}, which its package does not depend on`);
    }
  }
  // Whatever imports test code is test code too (or would not load without it).
  for (let changed = true; changed;) {
    changed = false;
    for (const [path, targets] of relativeImports) {
      if (why.has(path)) continue;
      const target = targets.find(
        (target) => why.has(target) || (!shipped.has(target) && isTestCode(target)),
      );
      if (target === undefined) continue;
      why.set(path, `imports ${target}, test code`);
      changed = true;
    }
  }
  return [...why].map(([path, reason]) => `${path}: ${reason}`).sort();
}

/**
 * Relative imports of shipped modules that point at no shipped file ("module → specifier").
 * @param {string} root @param {string[]} files
 */
export function missingImports(root, files) {
  const shipped = new Set(files);
  const missing = [];
  for (const path of files) {
    // A bundle's modules are inside it; it imports only packages.
    if (!path.endsWith('.js') || bundleManifest(root, path) !== undefined) continue;
    for (const specifier of importsOf(readFileSync(join(root, path), 'utf8'))) {
      if (!specifier.startsWith('.')) continue;
      if (!shipped.has(posix.join(posix.dirname(path), specifier))) {
        missing.push(`${path} → ${specifier}`);
      }
    }
  }
  return missing;
}

// The Node.js check `npm start` runs before scripts/start.mjs (package.json's start script): on
// a Node older than package.json's engines asks for, it says so and exits 1, where the start
// script itself would stop on the first module it cannot load, with a stack trace. A process of
// its own, importing nothing but node:fs, in syntax any Node since 12 runs.
import { readFileSync } from 'node:fs';

const packageJson = new URL('../../package.json', import.meta.url);
const range = JSON.parse(readFileSync(packageJson, 'utf8')).engines.node;
const wanted = /^>=\s*(\d+)\.(\d+)(?:\.(\d+))?$/.exec(range);
if (wanted === null) {
  process.stderr.write(`gpushards: package.json's engines.node "${range}" is not ">=X.Y[.Z]"\n`);
  process.exit(1);
}
const minimum = wanted.slice(1).map((part) => Number(part || 0));
const running = process.version.replace(/^v/, '').split('.').map(Number);

/** a < b, comparing [major, minor, patch] in order. */
function older(a, b) {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] < b[i];
  return false;
}

if (older(running, minimum)) {
  process.stderr.write(
    [
      `gpushards: npm start needs Node.js ${minimum[0]}.${minimum[1]} or newer; this is Node.js ${running.join('.')} (${process.execPath}).`,
      `Debian 12's own nodejs is 18. README.md, "Prerequisites", says how to get a newer one:`,
      `NodeSource's Debian packages, the official binaries from nodejs.org, or a version manager.`,
      '',
    ].join('\n'),
  );
  process.exit(1);
}

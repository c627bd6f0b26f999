// The agent's installable build: what a GPU host needs to run apps/agent/dist/main.js, and no
// test code (as the control plane's image). From the repository root, after `npm ci && npm run
// build`:
//
//   node deploy/agent/bundle.mjs [--out gpushards-agent.tar.gz]
//
// The archive holds the workspace's package.json and package-lock.json, the package.json of the
// agent and of the libraries it uses with their dist/ folders (no testing/, no *.test.*, no
// module that imports what only tests have: deploy/test-code.mjs), the agent's systemd unit and
// example configuration, and its docs. On the host (docs/operations.md, "Installing an agent"):
//
//   mkdir -p /opt/gpushards && tar -xzf gpushards-agent.tar.gz -C /opt/gpushards
//   cd /opt/gpushards && npm ci --omit=dev --workspace @gpushards/agent --no-audit --no-fund
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { isTestCode, testCodeAmong } from '../test-code.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The built folders the agent runs from. */
export const AGENT_DIST = [
  'libs/limits/dist',
  'libs/protocol/dist',
  'libs/link/dist',
  'apps/agent/dist',
];
/** npm ci reads the lockfile through the workspaces' package.json files (as the control plane's Dockerfile). */
const MANIFESTS = [
  'package.json',
  'package-lock.json',
  'libs/limits/package.json',
  'libs/protocol/package.json',
  'libs/link/package.json',
  'apps/control-plane/package.json',
  'apps/agent/package.json',
];
const EXTRAS = [
  'deploy/agent/gpushards-agent.service',
  'deploy/agent/agent.env',
  'docs/agent.md',
  'docs/operations.md',
];

function filesUnder(folder) {
  return readdirSync(join(root, folder), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(root, join(entry.parentPath, entry.name)));
}

/** The files the bundle holds, relative to the repository root; throws when a build is missing. */
export function bundleFiles() {
  for (const folder of AGENT_DIST) {
    if (!existsSync(join(root, folder))) {
      throw new Error(`${folder} is missing: run \`npm ci && npm run build\` first`);
    }
  }
  const built = AGENT_DIST.flatMap(filesUnder).filter((path) => !isTestCode(path));
  const files = [...MANIFESTS, ...EXTRAS, ...built];
  const testCode = testCodeAmong(root, files);
  if (testCode.length > 0) {
    throw new Error(`test code would ship with the agent:\n  ${testCode.join('\n  ')}`);
  }
  return files;
}

/** Writes the archive to `out`; returns the files it holds. */
export function writeBundle(out) {
  const files = bundleFiles();
  const stage = mkdtempSync(join(tmpdir(), 'gpushards-agent-bundle-'));
  try {
    for (const path of files) {
      mkdirSync(join(stage, dirname(path)), { recursive: true });
      copyFileSync(join(root, path), join(stage, path));
    }
    execFileSync('tar', ['-czf', resolve(out), '--owner=0', '--group=0', '-C', stage, '.']);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
  return files;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: { out: { type: 'string', default: 'gpushards-agent.tar.gz' } },
  });
  try {
    const files = writeBundle(values.out);
    console.log(`wrote ${values.out}: ${files.length} files, no test code`);
  } catch (error) {
    console.error(`gpushards agent bundle: ${error.message}`);
    process.exit(1);
  }
}

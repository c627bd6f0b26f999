// Builds what the one-box launcher and the demo image need, only when it is missing or older
// than its sources: the TypeScript projects (through Nx, which builds the libraries they depend
// on first) and the native interposer plus the fake NVIDIA libraries (through CMake).
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

import { REPO_ROOT } from './paths.mjs';

export const NATIVE_BUILD_DIR = join(REPO_ROOT, 'native/build');
export const INTERPOSER_PATH = join(NATIVE_BUILD_DIR, 'libvgpu.so');
export const FAKE_DRIVER_DIR = join(NATIVE_BUILD_DIR, 'fake-driver');

/** The TypeScript projects the launcher imports, and what each one's sources are. */
const TYPESCRIPT_PROJECTS = [
  { name: 'control-plane', root: 'apps/control-plane', extraSources: ['prisma'] },
  { name: 'agent', root: 'apps/agent', extraSources: [] },
  { name: 'protocol', root: 'libs/protocol', extraSources: [] },
  { name: 'limits', root: 'libs/limits', extraSources: [] },
  // The team portal the control plane serves at `/`, and the gpushards command line.
  {
    name: 'portal',
    root: 'apps/portal',
    extraSources: ['docs/schema.graphql'],
    entry: 'dist/index.html',
  },
  { name: 'cli', root: 'apps/cli', extraSources: ['docs/schema.graphql'], entry: 'dist/main.js' },
];

/**
 * Runs a command with its output indented under the step's title, so a first build shows
 * progress; resolves when it succeeds, rejects with the command's last lines otherwise.
 */
export function runStep(
  command,
  args,
  { cwd = REPO_ROOT, env = process.env, out = process.stdout } = {},
) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let tail = '';
    let pending = '';
    const forward = (chunk) => {
      tail = (tail + chunk).slice(-4000);
      pending += chunk;
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) if (line.trim() !== '') out.write(`    │ ${line}\n`);
    };
    child.stdout.on('data', forward);
    child.stderr.on('data', forward);
    child.on('error', (error) =>
      reject(new Error(`cannot run ${command}: ${error.message}`, { cause: error })),
    );
    child.on('close', (code, signal) => {
      if (pending.trim() !== '') out.write(`    │ ${pending}\n`);
      if (code === 0) resolve();
      else
        reject(
          new Error(
            `${command} ${args.join(' ')} failed (${signal ?? `exit ${code}`}):\n${tail.trim()}`,
          ),
        );
    });
  });
}

/** The newest modification time of any file under these paths (build outputs skipped). */
function newestSourceTime(paths) {
  let newest = 0;
  const visit = (path) => {
    const stat = statSync(path, { throwIfNoEntry: false });
    if (stat === undefined) return;
    if (!stat.isDirectory()) {
      newest = Math.max(newest, stat.mtimeMs);
      return;
    }
    for (const entry of readdirSync(path)) {
      if (['dist', 'node_modules', 'generated', 'build'].includes(entry)) continue;
      visit(join(path, entry));
    }
  };
  paths.forEach(visit);
  return newest;
}

/** Why the TypeScript projects need a build, or undefined when every dist/ is current. */
function typescriptBuildReason() {
  for (const project of TYPESCRIPT_PROJECTS) {
    // The folder, not its files: Nx restores cached files with their old times, but the
    // folder itself is made anew by every build and every restore.
    const built = statSync(join(REPO_ROOT, project.root, 'dist'), { throwIfNoEntry: false });
    const entry = project.entry ?? 'dist/index.js';
    if (built === undefined || !existsSync(join(REPO_ROOT, project.root, entry))) {
      return `${project.root}/dist is missing`;
    }
    const sources = [
      join(REPO_ROOT, project.root, 'src'),
      join(REPO_ROOT, project.root, 'package.json'),
      join(REPO_ROOT, project.root, 'tsconfig.json'),
      ...project.extraSources.map((path) => join(REPO_ROOT, path)),
    ];
    if (newestSourceTime(sources) > built.mtimeMs) {
      return `${project.root} changed since its last build`;
    }
  }
  return undefined;
}

/**
 * Builds the TypeScript projects and native/ when needed. `say(line)` prints a step title.
 * Throws an Error whose message says what failed and what to do.
 */
export async function ensureBuilt({ say, out = process.stdout }) {
  if (!existsSync(join(REPO_ROOT, 'node_modules/.bin/nx'))) {
    throw new Error('node_modules is missing: run `npm ci` first');
  }
  const reason = typescriptBuildReason();
  if (reason !== undefined) {
    say(
      `building the control plane, the agent, the portal and the CLI (${reason}); a first build takes a minute`,
    );
    const started = Date.now();
    await runStep(
      join(REPO_ROOT, 'node_modules/.bin/nx'),
      [
        'run-many',
        '-t',
        'build',
        '-p',
        'control-plane',
        'agent',
        'portal',
        'cli',
        '--output-style=stream',
      ],
      { env: { ...process.env, NX_DAEMON: 'false', NX_NO_CLOUD: 'true', FORCE_COLOR: '0' }, out },
    );
    say(`built in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  }
  await ensureNativeBuilt({ say, out });
}

/** Builds libvgpu.so and the fake NVIDIA libraries (incremental: quick when they are current). */
export async function ensureNativeBuilt({ say, out = process.stdout }) {
  const missing = [INTERPOSER_PATH, join(FAKE_DRIVER_DIR, 'libcuda.so.1')].some(
    (path) => !existsSync(path),
  );
  if (missing) say('building native/ (libvgpu.so and the fake NVIDIA libraries) with CMake');
  if (!existsSync(join(NATIVE_BUILD_DIR, 'CMakeCache.txt'))) {
    await runStep(
      'cmake',
      ['-S', join(REPO_ROOT, 'native'), '-B', NATIVE_BUILD_DIR, '-DCMAKE_BUILD_TYPE=Release'],
      { out },
    );
  }
  // Quiet when nothing changed: make prints only what it rebuilds.
  await runStep(
    'cmake',
    ['--build', NATIVE_BUILD_DIR, '--parallel', '2', '--target', 'vgpu', 'fake_cuda', 'fake_nvml'],
    { out: missing ? out : { write: () => true } },
  );
}

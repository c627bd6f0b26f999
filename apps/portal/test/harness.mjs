// One real control plane for the portal and CLI tests: `npm start` (scripts/start.mjs) in a
// temporary data folder on a free port, PGlite, simulated GPUs, the in-process agent and the
// local Docker engine, plus the demo image built locally.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '../../..');
export const CLI = join(REPO_ROOT, 'apps/cli/dist/main.js');
// Per process: two runs on one Docker engine (a developer's and CI's) must not remove each
// other's image when they end.
export const IMAGE = `gpushards/portal-probe:test-${process.pid}`;

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * Starts the one box; resolves once its banner is printed. `env` adds variables (a provider to
 * sign in with), `port` picks the port (a provider needs the redirect URI before the box starts).
 */
export async function startBox({ env = {}, port: chosen } = {}) {
  const built = spawnSync(
    process.execPath,
    [join(REPO_ROOT, 'scripts/one-box/demo-image.mjs'), '--tag', IMAGE],
    { encoding: 'utf8' },
  );
  if (built.status !== 0) throw new Error(`demo image: ${built.stdout}${built.stderr}`);
  const dataDir = mkdtempSync(join(tmpdir(), 'gpushards-portal-'));
  const port = chosen ?? (await freePort());
  const child = spawn(process.execPath, [join(REPO_ROOT, 'scripts/start.mjs')], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      GPUSHARDS_DATA_DIR: dataDir,
      GPUSHARDS_PORT: String(port),
      GPUSHARDS_SIMULATE_GPUS: '2xTest GPU:8g',
      GPUSHARDS_HOST_ID: '',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise((resolve) => child.on('exit', resolve));
  await new Promise((resolve, reject) => {
    const watch = (chunk) => {
      output += chunk;
      if (/Ctrl-C stops[\s\S]*\n─{20,}\n/.test(output)) resolve();
    };
    child.stdout.on('data', watch);
    child.stderr.on('data', (chunk) => (output += chunk));
    void exited.then((code) => reject(new Error(`npm start exited with ${code}:\n${output}`)));
  });
  const url = `http://127.0.0.1:${port}`;
  const adminToken = readFileSync(join(dataDir, 'admin-token'), 'utf8').trim();
  return {
    url,
    dataDir,
    adminToken,
    output: () => output,
    async stop() {
      child.kill('SIGINT');
      await exited;
      let hostId;
      try {
        hostId = readFileSync(join(dataDir, 'host-id'), 'utf8').trim();
      } catch {
        hostId = undefined;
      }
      if (hostId) {
        const left = spawnSync(
          'docker',
          ['ps', '-aq', '--filter', `label=io.gpushards.host=${hostId}`],
          { encoding: 'utf8' },
        ).stdout.trim();
        if (left !== '') spawnSync('docker', ['rm', '-f', ...left.split('\n')]);
      }
      spawnSync('docker', ['rmi', '-f', IMAGE]);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Runs `gpushards …` as a process; resolves to { code, stdout, stderr, json }. */
export function cli(args, { env = {}, input } = {}) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { ...process.env, ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.stdin.end(input ?? '');
    child.on('close', (code) => {
      let json;
      try {
        json = JSON.parse(stdout);
      } catch {
        json = undefined;
      }
      resolve({ code, stdout, stderr, json });
    });
  });
}

/** Follows a long-running `gpushards …` (top); resolves lines as they come. */
export function cliStream(args, env) {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let buffer = '';
  let stderr = '';
  const ready = new Promise((resolve) =>
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
      if (stderr.includes('watching')) resolve();
    }),
  );
  const waiters = [];
  const lines = [];
  child.stdout.on('data', (chunk) => {
    buffer += chunk;
    const parts = buffer.split('\n');
    buffer = parts.pop() ?? '';
    for (const line of parts) {
      lines.push(line);
      for (const waiter of [...waiters]) {
        if (waiter.match(line)) {
          waiters.splice(waiters.indexOf(waiter), 1);
          waiter.resolve(line);
        }
      }
    }
  });
  return {
    child,
    lines,
    /** Resolves once it is subscribed and has listed what is there. */
    ready,
    /** The first line (already seen or to come) that `match` accepts. */
    next(match) {
      const seen = lines.find(match);
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve) => waiters.push({ match, resolve }));
    },
    stop() {
      child.kill('SIGTERM');
      return new Promise((resolve) => child.on('close', resolve));
    },
  };
}

// What the one-box tests share: a free port, and the one box started as a person starts it
// (node scripts/start.mjs, or npm start) with its own data folder, simulated GPUs and that port.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';

import { REPO_ROOT } from './paths.mjs';

// A first start may build the TypeScript projects and native/ (a minute or more on 2 cores).
export const START_TIMEOUT_MS = 8 * 60_000;

/** A port nothing listens on now (the kernel's pick). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port: chosen } = server.address();
      server.close(() => resolve(chosen));
    });
  });
}

/** Whether something listens on 127.0.0.1:port. */
export function portInUse(port) {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (error) => (error.code === 'EADDRINUSE' ? resolve(true) : reject(error)));
    probe.listen({ host: '127.0.0.1', port, exclusive: true }, () =>
      probe.close(() => resolve(false)),
    );
  });
}

/**
 * Starts the one box on `port` with `dataDir`: `node scripts/start.mjs`, or with `npm: true`
 * `npm start` (the child is then npm). Returns { child, output, exited, ready }: `exited`
 * resolves to the exit code (or the signal's name), `ready` to the GraphQL URL once the banner
 * is printed, and rejects if it exits first or prints none within `timeoutMs`.
 */
export function startLauncher({ dataDir, port, npm = false, timeoutMs = START_TIMEOUT_MS }) {
  const [command, args] = npm
    ? ['npm', ['start']]
    : [process.execPath, [join(REPO_ROOT, 'scripts/start.mjs')]];
  const child = spawn(command, args, {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      GPUSHARDS_DATA_DIR: dataDir,
      GPUSHARDS_PORT: String(port),
      GPUSHARDS_SIMULATE_GPUS: '2xTest GPU:8g',
      GPUSHARDS_HOST_ID: '',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const running = { child, output: '' };
  child.stdout.on('data', (chunk) => (running.output += chunk));
  child.stderr.on('data', (chunk) => (running.output += chunk));
  running.exited = new Promise((resolve) =>
    child.on('exit', (code, signal) => resolve(signal ?? code)),
  );
  running.ready = new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no banner after ${timeoutMs} ms:\n${running.output}`)),
      timeoutMs,
    );
    const watch = () => {
      // The banner ends with "Ctrl-C stops ..." and a rule.
      const match =
        /GraphQL\s+(?:POST\s+)?(http:\/\/\S+\/graphql)[\s\S]*Ctrl-C stops[\s\S]*\n─{20,}\n/.exec(
          running.output,
        );
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    };
    child.stdout.on('data', watch);
    void running.exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the launcher exited with ${code} before serving:\n${running.output}`));
    });
  });
  return running;
}

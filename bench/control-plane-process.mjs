// A control plane as its own process (`node dist/main.js`), for the benches that start, kill
// and restart one.
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { cpuOf } from './proc-cpu.mjs';

/** A TCP port free on 127.0.0.1 now. */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/**
 * Spawns `dist`/main.js with `env` added (GPUSHARDS_PORT among it) and `nodeArgs` before it, and
 * waits for the first 200 from /readyz, asking every 10 ms. Resolves with the child, a promise of
 * its exit, the ms from spawn to ready, its CPU ms until then and what it wrote so far; throws
 * with its output if it exits first.
 */
export async function startControlPlane(dist, env, { nodeArgs = [] } = {}) {
  const child = spawn(process.execPath, [...nodeArgs, join(dist, 'main.js')], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise((resolveExit) =>
    child.on('exit', (code, signal) => resolveExit(signal ?? code)),
  );
  const t0 = performance.now();
  const url = `http://127.0.0.1:${env.GPUSHARDS_PORT}/readyz`;
  for (;;) {
    const ended = await Promise.race([
      exited,
      new Promise((r) => setTimeout(() => r(undefined), 10)),
    ]);
    if (ended !== undefined) throw new Error(`control plane exited (${ended}): ${output}`);
    try {
      const response = await fetch(url);
      if (response.status === 200) {
        // Its CPU until then (every thread: V8's compiler threads too), from /proc: what the
        // start costs whatever else the machine runs; the wall time mostly measures the wait
        // for a core on a loaded one.
        return {
          child,
          exited,
          ms: performance.now() - t0,
          cpuMs: cpuOf(child.pid) * 1000,
          output: () => output,
        };
      }
    } catch {
      // not listening yet
    }
  }
}

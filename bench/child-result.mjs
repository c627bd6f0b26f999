// The benches that run each build in a child process of their own (two builds' modules cannot
// share one): the child prints one RESULT line, the parent reads it.
import { spawn } from 'node:child_process';

/** In the child: its result, as the one line the parent reads. */
export function printResult(result) {
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
}

/**
 * In the parent: runs `node ...nodeArgs script ...args` (stderr passed through; `onSpawn` is
 * given the child at once, e.g. to pin it) and resolves to the result it printed; throws with
 * its output when it fails or prints none.
 */
export async function runForResult(script, args, { nodeArgs = [], onSpawn } = {}) {
  const child = spawn(process.execPath, [...nodeArgs, script, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  onSpawn?.(child);
  let out = '';
  child.stdout.on('data', (chunk) => (out += chunk));
  const code = await new Promise((resolveExit) => child.on('exit', resolveExit));
  const line = out.split('\n').find((l) => l.startsWith('RESULT '));
  if (code !== 0 || line === undefined) {
    throw new Error(`${script} ${args.join(' ')} failed (${code}): ${out}`);
  }
  return JSON.parse(line.slice('RESULT '.length));
}

import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/** A control plane run as a process (testing/control-plane-process.js), for multi-replica tests. */
export interface ControlPlaneChild {
  readonly process: ChildProcess;
  readonly graphqlUrl: string;
  /** Its error log lines (pino level 50 and up), to explain a failure. */
  readonly errors: string[];
  /** Resolves with the first log line, printed so far or later, that includes `text`. */
  logged(text: string): Promise<string>;
  /** SIGTERM, and waits for it to exit (nothing if it already has). */
  stop(): Promise<void>;
  /** SIGKILL, and waits for it to exit: no shutdown hook runs. */
  kill(): Promise<void>;
}

/**
 * Starts the control plane as a process against the database (as `node dist/main.js`, with
 * no agents: commands are recorded in it); resolves once it listens.
 */
export async function startControlPlaneChild(
  databaseUrl: string,
  dataDir: string,
  env: Record<string, string> = {},
): Promise<ControlPlaneChild> {
  const main = fileURLToPath(new URL('./control-plane-process.js', import.meta.url));
  const child = spawn(process.execPath, [main], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      GPUSHARDS_PORT: '0',
      GPUSHARDS_HOST: '127.0.0.1',
      GPUSHARDS_DATA_DIR: dataDir,
      GPUSHARDS_DATABASE_POOL_SIZE: '8',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const lines = createInterface({ input: child.stdout! });
  const errors: string[] = [];
  const printed: string[] = [];
  const watchers: { text: string; resolve: (line: string) => void }[] = [];
  lines.on('line', (line) => {
    if (/"level":(5|6)\d/.test(line) && errors.length < 20) errors.push(line);
    printed.push(line);
    for (const watcher of [...watchers]) {
      if (!line.includes(watcher.text)) continue;
      watchers.splice(watchers.indexOf(watcher), 1);
      watcher.resolve(line);
    }
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const logged = (text: string) =>
    new Promise<string>((resolve, reject) => {
      const earlier = printed.find((line) => line.includes(text));
      if (earlier !== undefined) return resolve(earlier);
      watchers.push({ text, resolve });
      exited.then(() => reject(new Error(`exited before logging "${text}": ${stderr}`)));
    });
  // A child that never listens is ended by the calling test's timeout; one that exits rejects.
  const listening = await logged('control plane listening');
  const url = (JSON.parse(listening) as { url: string }).url;
  const signal = async (name: NodeJS.Signals) => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill(name);
    await exited;
  };
  return {
    process: child,
    graphqlUrl: `${url}/graphql`,
    errors,
    logged,
    stop: () => signal('SIGTERM'),
    kill: () => signal('SIGKILL'),
  };
}

import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:net';

/** Every process group this run started, so that an exit of any kind can take them down. */
const liveGroups = new Set<number>();

/** SIGKILL to every process group still alive; for exit paths that cannot wait. */
export function killAllGroups(): void {
  for (const pid of liveGroups) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  liveGroups.clear();
}

export interface ProcessSpec {
  /** For messages: "control plane 1", "agent host-a". */
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  readonly env: NodeJS.ProcessEnv;
  /** stdout and stderr are appended here (kept across restarts). */
  readonly logFile: string;
  readonly cwd?: string;
}

/**
 * One system process, in a process group of its own (so kill -9 takes its children too),
 * its output appended to a log file that tests read (`waitForLog`).
 */
export class ManagedProcess {
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  /** Where the log stood when the process was last started. */
  logStart = 0;

  constructor(readonly spec: ProcessSpec) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && !this.child.signalCode;
  }

  start(): void {
    if (this.running) throw new Error(`${this.spec.name} is already running`);
    this.logStart = logSize(this.spec.logFile);
    const fd = openSync(this.spec.logFile, 'a');
    try {
      const child = spawn(this.spec.command, [...this.spec.args], {
        env: this.spec.env,
        cwd: this.spec.cwd,
        detached: true,
        stdio: ['ignore', fd, fd],
      });
      this.child = child;
      const pid = child.pid;
      if (pid !== undefined) liveGroups.add(pid);
      this.exited = new Promise((resolve) => {
        child.once('exit', () => {
          if (pid !== undefined) liveGroups.delete(pid);
          resolve();
        });
        child.once('error', () => resolve());
      });
    } finally {
      closeSync(fd);
    }
  }

  /** kill -9 of the whole process group, like a crash; resolves once it is gone. */
  async kill9(): Promise<void> {
    this.signalGroup('SIGKILL');
    await this.exited;
    this.child = undefined;
  }

  /** SIGTERM to the process, SIGKILL to the group after `graceMs`. */
  async stop(graceMs = 5_000): Promise<void> {
    if (!this.running) {
      this.signalGroup('SIGKILL');
      this.child = undefined;
      return;
    }
    try {
      process.kill(this.child!.pid!, 'SIGTERM');
    } catch {
      // gone already
    }
    const timer = setTimeout(() => this.signalGroup('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
    this.signalGroup('SIGKILL'); // anything it left behind in its group
    this.child = undefined;
  }

  /** The log written since the last start. */
  logSinceStart(): string {
    return readLog(this.spec.logFile, this.logStart);
  }

  /** Waits for `pattern` in the log after byte `from` (default: since the last start). */
  async waitForLog(pattern: RegExp, timeoutMs: number, from = this.logStart): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const text = readLog(this.spec.logFile, from);
      const match = pattern.exec(text);
      if (match) return match[0];
      if (!this.running) {
        throw new Error(
          `${this.spec.name} exited before logging ${pattern}; its log:\n${tail(text)}`,
        );
      }
      if (Date.now() > deadline) {
        throw new Error(
          `${this.spec.name} did not log ${pattern} within ${timeoutMs} ms; its log:\n${tail(text)}`,
        );
      }
      await sleep(100);
    }
  }

  private signalGroup(signal: NodeJS.Signals): void {
    const pid = this.child?.pid;
    if (pid === undefined) return;
    try {
      process.kill(-pid, signal);
    } catch {
      // gone already
    }
  }
}

export function logSize(file: string): number {
  return statSync(file, { throwIfNoEntry: false })?.size ?? 0;
}

export function readLog(file: string, from = 0): string {
  try {
    return readFileSync(file).subarray(from).toString('utf8');
  } catch {
    return '';
  }
}

export function tail(text: string, lines = 30): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address !== null
          ? resolve(address.port)
          : reject(new Error('no free port')),
      );
    });
  });
}

/** Polls `probe` until it returns something other than undefined; the last error is the cause. */
export async function waitFor<T>(
  what: string,
  probe: () => T | undefined | Promise<T | undefined>,
  timeoutMs = 20_000,
  intervalMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
      last = undefined;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      const why = last instanceof Error ? `: ${last.message}` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${why}`, {
        cause: last,
      });
    }
    await sleep(intervalMs);
  }
}

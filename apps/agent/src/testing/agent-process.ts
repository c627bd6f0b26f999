import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

import type { NatsAuth } from '../link/nats-agent-link.js';
import { REPO_ROOT } from './paths.js';
import { waitFor } from './processes.js';

/** An agent in a process of its own (main.js), as a host runs it: one a test can kill -9. */
export interface AgentProcess {
  readonly child: ChildProcess;
  /** Its log lines so far, parsed (pino JSON). */
  logs(): Record<string, unknown>[];
  /** Resolves to the first log line (from the start) whose msg is `message` and that `match`es. */
  logged(
    message: string,
    match?: (line: Record<string, unknown>) => boolean,
    timeoutMs?: number,
  ): Promise<Record<string, unknown>>;
  /** kill -9, and waits for it to be gone. */
  kill(): Promise<void>;
  /** SIGTERM (stops the agent, not its shards), and waits for it to be gone. */
  stop(): Promise<void>;
}

export interface AgentProcessSettings {
  readonly hostId: string;
  readonly natsUrl: string;
  readonly auth: NatsAuth;
  readonly stateDir: string;
  /** GPUSHARDS_SIMULATE_GPUS. */
  readonly gpus: string;
  readonly fakeLibraryDir: string;
  readonly interposerPath: string;
  /** More GPUSHARDS_* variables. */
  readonly env?: Record<string, string>;
}

/**
 * Starts apps/agent/dist/main.js with the environment a host would give it (docs/agent.md,
 * "Environment") and resolves once it registered ("agent started" in its log).
 */
export async function startAgentProcess(settings: AgentProcessSettings): Promise<AgentProcess> {
  const auth: Record<string, string> =
    settings.auth.kind === 'nkey'
      ? { GPUSHARDS_NATS_NKEY_SEED_FILE: settings.auth.seedFile }
      : settings.auth.kind === 'password'
        ? {
            GPUSHARDS_NATS_USER: settings.auth.user,
            GPUSHARDS_NATS_PASSWORD: settings.auth.password,
          }
        : { GPUSHARDS_NATS_CREDS: settings.auth.credsFile };
  const child = spawn(process.execPath, [join(REPO_ROOT, 'apps/agent/dist/main.js')], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      ...(process.env.DOCKER_HOST !== undefined ? { DOCKER_HOST: process.env.DOCKER_HOST } : {}),
      GPUSHARDS_HOST_ID: settings.hostId,
      GPUSHARDS_NATS_URL: settings.natsUrl,
      ...auth,
      GPUSHARDS_NATS_TIMEOUT_SECONDS: '5',
      GPUSHARDS_SIMULATE_GPUS: settings.gpus,
      GPUSHARDS_FAKE_LIBRARY_DIR: settings.fakeLibraryDir,
      GPUSHARDS_INTERPOSER_PATH: settings.interposerPath,
      GPUSHARDS_STATE_DIR: settings.stateDir,
      GPUSHARDS_HEARTBEAT_SECONDS: '1',
      GPUSHARDS_RECONCILE_SECONDS: '3600',
      GPUSHARDS_STOP_GRACE_SECONDS: '1',
      GPUSHARDS_LOG_LEVEL: 'info',
      ...settings.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  child.stdout?.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (text += chunk.toString()));
  const killOnExit = (): void => {
    child.kill('SIGKILL');
  };
  process.once('exit', killOnExit);
  const logs = () =>
    text.split('\n').flatMap((line) => {
      try {
        return [JSON.parse(line) as Record<string, unknown>];
      } catch {
        return [];
      }
    });
  const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const end = async (signal: NodeJS.Signals) => {
    process.removeListener('exit', killOnExit);
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await gone;
  };
  const agent: AgentProcess = {
    child,
    logs,
    logged: (message, match = () => true, timeoutMs = 30_000) =>
      waitFor(
        `"${message}" in the agent's log`,
        () => {
          if (child.exitCode !== null) {
            throw new Error(`the agent exited with ${child.exitCode}:\n${text.slice(-4000)}`);
          }
          return logs().find((line) => line.msg === message && match(line));
        },
        timeoutMs,
      ),
    kill: () => end('SIGKILL'),
    stop: () => end('SIGTERM'),
  };
  try {
    await agent.logged('agent started');
  } catch (error) {
    await agent.kill();
    throw error;
  }
  return agent;
}

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import type { NatsAuth } from '../link/nats-agent-link.js';
import { REPO_ROOT } from './paths.js';
import { freePort, startBackground } from './processes.js';

interface GeneratedConfig {
  serverConfig: string;
  credentials: Record<string, string>;
}

/** deploy/nats's ways: nkey or password users in users.conf, or decentralised JWT (.creds). */
export type TestNatsAuth = 'nkey' | 'password' | 'jwt';

interface Generator {
  writeConfig(out: string, hostIds: string[], auth?: TestNatsAuth): Promise<GeneratedConfig>;
  agentUser(hostId: string): string;
  CONTROL_PLANE_USER: string;
}

export interface TestNatsServer {
  readonly url: string;
  /** How the control plane connects. */
  readonly controlPlane: NatsAuth;
  /** How the agent of `hostId` connects. */
  agent(hostId: string): NatsAuth;
  /** --auth jwt: the control plane's GPUSHARDS_NATS_REVOCATION_FILE; otherwise undefined. */
  readonly revocationFile: string | undefined;
  /** Stops the server and starts it again on the same port (clients reconnect). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A real nats-server on a free port, configured by deploy/nats (nats-server.conf and the
 * users generate-config.mjs writes for `hostIds`): tests run under the permissions the
 * fleet runs under.
 */
export async function startNatsServer(
  hostIds: string[],
  auth: TestNatsAuth = 'nkey',
): Promise<TestNatsServer> {
  const generator = (await import(
    pathToFileURL(join(REPO_ROOT, 'deploy/nats/generate-config.mjs')).href
  )) as Generator;
  const dir = mkdtempSync(join(tmpdir(), 'gpushards-nats-'));
  const config = await generator.writeConfig(dir, hostIds, auth);
  const port = await freePort();
  const args = ['-c', config.serverConfig, '-a', '127.0.0.1', '-p', String(port)];
  let server = await startBackground('nats-server', args, /Server is ready/);
  const envOf = (user: string): Record<string, string> => {
    const file = config.credentials[user];
    if (file === undefined) throw new Error(`no NATS user ${user} in the test configuration`);
    return Object.fromEntries(
      readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
    );
  };
  const credentialsOf = (user: string): NatsAuth => {
    const env = envOf(user);
    if (env.GPUSHARDS_NATS_CREDS) return { kind: 'creds', credsFile: env.GPUSHARDS_NATS_CREDS };
    if (env.GPUSHARDS_NATS_NKEY_SEED_FILE)
      return { kind: 'nkey', seedFile: env.GPUSHARDS_NATS_NKEY_SEED_FILE };
    return {
      kind: 'password',
      user: env.GPUSHARDS_NATS_USER ?? '',
      password: env.GPUSHARDS_NATS_PASSWORD ?? '',
    };
  };
  return {
    url: `nats://127.0.0.1:${port}`,
    controlPlane: credentialsOf(generator.CONTROL_PLANE_USER),
    agent: (hostId) => credentialsOf(generator.agentUser(hostId)),
    revocationFile: envOf(generator.CONTROL_PLANE_USER).GPUSHARDS_NATS_REVOCATION_FILE,
    restart: async () => {
      await server.stop();
      server = await startBackground('nats-server', args, /Server is ready/);
    },
    stop: async () => {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

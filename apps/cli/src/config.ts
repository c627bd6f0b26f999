import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { CliError, EXIT } from './exit-codes.js';

export interface Login {
  readonly url: string;
  readonly token: string;
}

/** $XDG_CONFIG_HOME/gpushards/config.json (~/.config/…; %APPDATA%\gpushards on Windows). */
export function configPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env['GPUSHARDS_CONFIG']) return env['GPUSHARDS_CONFIG'];
  const base =
    env['XDG_CONFIG_HOME'] ||
    (process.platform === 'win32' && env['APPDATA'] ? env['APPDATA'] : join(homedir(), '.config'));
  return join(base, 'gpushards', 'config.json');
}

/** Written with mode 0600 in a 0700 folder: the token is a secret. */
export function saveLogin(login: Login, path = configPath()): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileSync(path, `${JSON.stringify(login, null, 2)}\n`, { mode: 0o600 });
  chmodSync(path, 0o600);
}

/** What `gpushards login` stored, if anything. */
export function storedLogin(path = configPath()): Login | undefined {
  try {
    const stored = JSON.parse(readFileSync(path, 'utf8')) as Partial<Login>;
    return stored.url && stored.token ? { url: stored.url, token: stored.token } : undefined;
  } catch {
    return undefined;
  }
}

export function removeLogin(path = configPath()): boolean {
  try {
    rmSync(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * The control plane and token to use: --url/--token, then GPUSHARDS_URL/GPUSHARDS_TOKEN, then
 * what `gpushards login` stored.
 */
export function resolveLogin(
  options: { url?: string | undefined; token?: string | undefined },
  env: NodeJS.ProcessEnv = process.env,
): Login {
  let stored: Partial<Login>;
  try {
    stored = JSON.parse(readFileSync(configPath(env), 'utf8')) as Partial<Login>;
  } catch {
    stored = {};
  }
  const url = options.url ?? env['GPUSHARDS_URL'] ?? stored.url;
  const token = options.token ?? env['GPUSHARDS_TOKEN'] ?? stored.token;
  if (!url || !token) {
    throw new CliError(
      'not logged in: run `gpushards login --url http://127.0.0.1:4000 --token gps_…` ' +
        '(or set GPUSHARDS_URL and GPUSHARDS_TOKEN)',
      EXIT.UNAUTHENTICATED,
      'UNAUTHENTICATED',
    );
  }
  return { url: url.replace(/\/+$/, '').replace(/\/graphql$/, ''), token };
}

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

/** A throwaway PostgreSQL cluster of one test run. */
export interface PostgresServer {
  /** Superuser URL of the `postgres` database: postgresql://postgres@127.0.0.1:<port>/postgres */
  readonly url: string;
  readonly port: number;
  /** The cluster's folder (data/ and the unix socket live here). */
  readonly dir: string;
  /** URL of another database on this server. */
  urlFor(database: string): string;
  /** Fast shutdown, then deletes the cluster. */
  stop(): Promise<void>;
  /** Fast shutdown and start again on the same port with the same data. */
  restart(): Promise<void>;
  /** SIGKILL to the postmaster and every backend at once, like a crash. `restart()` recovers. */
  kill(): Promise<void>;
}

export interface StartPostgresOptions {
  /** Folder with initdb and postgres; default: $GPUSHARDS_POSTGRES_BIN_DIR, else the newest /usr/lib/postgresql/<version>/bin. */
  readonly binDir?: string;
  /** Extra `-c name=value` settings. */
  readonly settings?: Readonly<Record<string, string>>;
}

const READY_TIMEOUT_MS = 30_000;

/** PostgreSQL refuses to run as root; as root, the cluster belongs to this OS user. */
const CLUSTER_OS_USER = 'postgres';

/**
 * Starts a fresh PostgreSQL cluster in a new temporary folder: trust authentication, fsync
 * off (speed; kill() loses no committed transaction, only a machine crash would), listening on 127.0.0.1 at a
 * free port and on a unix socket inside the folder. As root, initdb and postgres run as the
 * `postgres` OS user (the PostgreSQL packages create it). Call stop() when done; a process
 * that exits without it still kills its servers.
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<PostgresServer> {
  const binDir = options.binDir ?? findPostgresBinDir();
  const owner = clusterOwner();
  const dir = mkdtempSync(join(tmpdir(), 'gpushards-pg-'));
  const dataDir = join(dir, 'data');
  mkdirSync(dataDir, { mode: 0o700 });
  if (owner !== undefined) {
    chownSync(dir, owner.uid, owner.gid);
    chownSync(dataDir, owner.uid, owner.gid);
  }
  const initdb = spawnSync(
    join(binDir, 'initdb'),
    ['-D', dataDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-locale', '--no-sync'],
    { encoding: 'utf8', cwd: dir, ...(owner ?? {}) },
  );
  if (initdb.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `initdb failed (${initdb.status ?? initdb.signal}): ${initdb.stderr}${initdb.error ?? ''}`,
    );
  }
  const server = new PostgresProcess(
    binDir,
    dir,
    dataDir,
    await freePort(),
    owner,
    options.settings ?? {},
  );
  try {
    await server.start();
  } catch (error) {
    await server.stop();
    throw error;
  }
  return server;
}

class PostgresProcess implements PostgresServer {
  readonly url: string;
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private log = '';
  private readonly killOnExit = () => this.signal('SIGKILL');

  constructor(
    private readonly binDir: string,
    readonly dir: string,
    private readonly dataDir: string,
    readonly port: number,
    private readonly owner: { uid: number; gid: number } | undefined,
    private readonly settings: Readonly<Record<string, string>>,
  ) {
    this.url = this.urlFor('postgres');
  }

  urlFor(database: string): string {
    return `postgresql://postgres@127.0.0.1:${this.port}/${encodeURIComponent(database)}`;
  }

  async start(): Promise<void> {
    const settings: Record<string, string> = {
      listen_addresses: '127.0.0.1',
      port: String(this.port),
      unix_socket_directories: this.dir,
      // Off for speed: a killed server still keeps every commit (the kernel has the WAL);
      // only a crash of the machine would lose some. synchronous_commit stays on for that.
      fsync: 'off',
      full_page_writes: 'off',
      max_connections: '200',
      ...this.settings,
    };
    const args = [
      '-D',
      this.dataDir,
      ...Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`]),
    ];
    this.log = '';
    // Its own process group, so kill() can take the backends down with the postmaster.
    const child = spawn(join(this.binDir, 'postgres'), args, {
      detached: true,
      cwd: this.dir,
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(this.owner ?? {}),
    });
    this.child = child;
    const keepLog = (chunk: Buffer) => {
      this.log = (this.log + chunk.toString()).slice(-8_000);
    };
    child.stdout?.on('data', keepLog);
    child.stderr?.on('data', keepLog);
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    process.once('exit', this.killOnExit);
    await this.waitUntilReady(child);
  }

  async stop(): Promise<void> {
    await this.shutDown('SIGINT');
    rmSync(this.dir, { recursive: true, force: true });
  }

  async restart(): Promise<void> {
    await this.shutDown('SIGINT');
    await this.start();
  }

  async kill(): Promise<void> {
    const pid = this.child?.pid;
    await this.shutDown('SIGKILL');
    // Wait for the backends too: while one is still attached to the cluster's shared memory,
    // the next postmaster refuses to start.
    if (pid !== undefined) await this.waitForGroupExit(pid);
  }

  private async shutDown(signal: NodeJS.Signals): Promise<void> {
    process.removeListener('exit', this.killOnExit);
    this.signal(signal);
    await this.exited;
    this.child = undefined;
  }

  private signal(signal: NodeJS.Signals): void {
    const pid = this.child?.pid;
    if (pid === undefined || this.child?.exitCode !== null) return;
    try {
      process.kill(signal === 'SIGKILL' ? -pid : pid, signal);
    } catch {
      // Already gone.
    }
  }

  private async waitForGroupExit(pid: number): Promise<void> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (!processGroupAlive(pid)) return;
      await sleep(20);
    }
    throw new Error(`PostgreSQL backends on port ${this.port} did not exit after SIGKILL`);
  }

  private async waitUntilReady(child: ChildProcess): Promise<void> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`PostgreSQL exited while starting:\n${this.log}`);
      }
      const client = new pg.Client({ connectionString: this.url });
      try {
        await client.connect();
        await client.query('SELECT 1');
        return;
      } catch {
        await sleep(50);
      } finally {
        await client.end().catch(() => {});
      }
    }
    throw new Error(
      `PostgreSQL did not accept connections within ${READY_TIMEOUT_MS} ms:\n${this.log}`,
    );
  }
}

/** Whether any live (not zombie) process is left in process group `groupId` (Linux /proc). */
function processGroupAlive(groupId: number): boolean {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(join('/proc', entry, 'stat'), 'utf8');
    } catch {
      continue; // ended while being looked at
    }
    // "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ")".
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === groupId && state !== 'Z') return true;
  }
  return false;
}

function findPostgresBinDir(): string {
  const fromEnv = process.env['GPUSHARDS_POSTGRES_BIN_DIR'];
  if (fromEnv) return fromEnv;
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((name) => existsSync(join(root, name, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  const newest = versions[0];
  if (newest === undefined) {
    throw new Error(
      'no PostgreSQL server binaries: install the postgresql package (apt-get install postgresql) ' +
        'or set GPUSHARDS_POSTGRES_BIN_DIR to the folder holding initdb and postgres',
    );
  }
  return join(root, newest, 'bin');
}

/** The uid/gid to run the cluster as: none when not root. */
function clusterOwner(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((entry) => entry.startsWith(`${CLUSTER_OS_USER}:`));
  const [, , uid, gid] = line?.split(':') ?? [];
  if (uid === undefined || gid === undefined) {
    throw new Error(
      `running as root, and PostgreSQL refuses to: create the "${CLUSTER_OS_USER}" OS user ` +
        `(installing the postgresql package does) or run the tests as another user`,
    );
  }
  return { uid: Number(uid), gid: Number(gid) };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address !== null
          ? resolve(address.port)
          : reject(new Error('no port')),
      );
    });
  });
}

function sleep(milliseconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, milliseconds));
}

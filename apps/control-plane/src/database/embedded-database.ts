import {
  existsSync,
  fsyncSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { NodeFS } from '@electric-sql/pglite/nodefs';
import type {
  SqlDriverAdapter,
  SqlMigrationAwareDriverAdapterFactory,
} from '@prisma/driver-adapter-utils';
import { PrismaPGlite } from 'pglite-prisma-adapter';
import { WholeScriptAdapter } from './whole-script-adapter.js';

/*
 * The embedded database: PostgreSQL compiled to WebAssembly (PGlite), one connection, its
 * files in a folder. pglite-prisma-adapter connects Prisma to it, with two fixes below.
 */

/** Emscripten's NODEFS internals that FsyncingNodeFS touches. */
interface NodeFsModule {
  NODEFS: {
    stream_ops: Record<string, unknown>;
    tryFSOperation?: <T>(operation: () => T) => T;
  };
}

/**
 * PGlite's file system for Node maps the database's files onto real ones but implements
 * fsync as a no-op, so even with fsync on in PostgreSQL a committed transaction could sit in
 * the kernel's page cache when the machine loses power. This subclass makes fsync real.
 */
class FsyncingNodeFS extends NodeFS {
  override async init(pg: PGlite, options: Parameters<NodeFS['init']>[1]) {
    const { emscriptenOpts } = await super.init(pg, options);
    const makeFsyncReal = (module: unknown) => {
      const nodeFs = (module as NodeFsModule).NODEFS;
      const run = nodeFs.tryFSOperation?.bind(nodeFs) ?? (<T>(operation: () => T) => operation());
      nodeFs.stream_ops['fsync'] = (stream: { nfd: number }) => run(() => fsyncSync(stream.nfd));
    };
    return {
      emscriptenOpts: {
        ...emscriptenOpts,
        preRun: [...(emscriptenOpts.preRun ?? []), makeFsyncReal],
      },
    };
  }
}

/**
 * PGlite starts PostgreSQL with `-F` (fsync off). Durable mode drops it and makes the WAL
 * flush with fsync(), the one sync call PGlite's Emscripten layer passes through
 * (fdatasync, PostgreSQL's default on Linux, is a no-op there).
 */
const DURABLE_START_PARAMS = [
  ...PGlite.defaultStartParams.filter((param) => param !== '-F'),
  '-c',
  'fsync=on',
  '-c',
  'wal_sync_method=fsync',
];

export interface EmbeddedDatabaseOptions {
  /** Real fsync on commit (see DatabaseConfig.embeddedDurable). */
  readonly durable: boolean;
}

/** An open embedded database; close() also releases the folder for other processes. */
export interface EmbeddedDatabase {
  readonly pglite: PGlite;
  close(): Promise<void>;
}

/** Marks a data folder as open; holds the pid of the process that has it. */
export const FOLDER_LOCK_FILE = 'gpushards.pid';

/**
 * Opens (creating when missing, parents included) the PGlite database in `dataDir`, or an
 * in-memory one when `dataDir` is undefined. Only one process may have a folder open:
 * PGlite itself would let a second one in and the two would corrupt it, so the folder is
 * claimed first (see claimFolder).
 */
export async function openEmbeddedDatabase(
  dataDir: string | undefined,
  options: EmbeddedDatabaseOptions,
): Promise<EmbeddedDatabase> {
  if (dataDir === undefined) {
    const pglite = await PGlite.create();
    return { pglite, close: () => pglite.close() };
  }
  // PGlite creates the folder itself but not its parents.
  mkdirSync(dataDir, { recursive: true });
  const release = claimFolder(dataDir);
  try {
    const pglite = await PGlite.create({
      fs: options.durable ? new FsyncingNodeFS(dataDir) : new NodeFS(dataDir),
      // Wait for the file system after each query (what PGlite does unless relaxed).
      relaxedDurability: false,
      ...(options.durable ? { startParams: DURABLE_START_PARAMS } : {}),
    });
    return {
      pglite,
      close: async () => {
        try {
          await pglite.close();
        } finally {
          release();
        }
      },
    };
  } catch (error) {
    release();
    throw error;
  }
}

/**
 * The folders this process has open. Process-wide on purpose: it mirrors the lock files,
 * which cannot tell this process's own earlier open from a dead process that had the same
 * pid (as after a container restart).
 */
const foldersOpenHere = new Set<string>();

/**
 * Writes this process's pid into the folder's lock file, refusing when a live process
 * (this one included) has the folder open. A file left by a process that died is taken
 * over. Returns the release function.
 */
function claimFolder(dataDir: string): () => void {
  const folder = realpathSync(dataDir);
  const lockPath = join(folder, FOLDER_LOCK_FILE);
  const ownPid = `${process.pid}\n`;
  if (foldersOpenHere.has(folder)) {
    throw new Error(`the embedded database in ${folder} is open in process ${process.pid} already`);
  }
  try {
    writeFileSync(lockPath, ownPid, { flag: 'wx' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    const holder = Number.parseInt(readFileSync(lockPath, 'utf8'), 10);
    if (holder !== process.pid && isAlive(holder)) {
      throw new Error(
        `the embedded database in ${dataDir} is open in process ${holder}; only one process ` +
          `may open it (if no control plane runs there, delete ${lockPath})`,
        { cause: error },
      );
    }
    writeFileSync(lockPath, ownPid);
  }
  foldersOpenHere.add(folder);
  return () => {
    foldersOpenHere.delete(folder);
    if (existsSync(lockPath) && readFileSync(lockPath, 'utf8') === ownPid) rmSync(lockPath);
  };
}

function isAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Prisma driver adapter factory for an open PGlite, usable both by PrismaClient and by the
 * schema engine. It fixes two things of pglite-prisma-adapter 0.7.2:
 * - executeScript did not wait for the script, so a failed migration was recorded as
 *   applied; here it waits (see WholeScriptAdapter);
 * - every shadow database it opened stayed open; here disposing one closes it.
 */
export class EmbeddedAdapterFactory implements SqlMigrationAwareDriverAdapterFactory {
  readonly provider = 'postgres';
  readonly adapterName: string;
  private readonly inner: PrismaPGlite;

  constructor(
    private readonly pglite: PGlite,
    private readonly options: { shadowIsMain?: boolean } = {},
  ) {
    this.inner = new PrismaPGlite(pglite);
    this.adapterName = this.inner.adapterName;
  }

  async connect(): Promise<SqlDriverAdapter> {
    const runScript = (script: string) => this.pglite.exec(script);
    return new WholeScriptAdapter(await this.inner.connect(), runScript, async () => {});
  }

  /**
   * A fresh in-memory database, or with `shadowIsMain` the main database itself: for a
   * throwaway main database that saves starting a second PGlite (seconds).
   */
  async connectToShadowDb(): Promise<SqlDriverAdapter> {
    if (this.options.shadowIsMain) return this.connect();
    const shadow = await PGlite.create();
    const adapter = await new PrismaPGlite(shadow).connect();
    return new WholeScriptAdapter(
      adapter,
      (script) => shadow.exec(script),
      () => shadow.close(),
    );
  }
}

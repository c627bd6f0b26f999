import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import {
  bindMigrationAwareSqlAdapterFactory,
  type SqlDriverAdapter,
  type SqlMigrationAwareDriverAdapterFactory,
} from '@prisma/driver-adapter-utils';
import type { SchemaEngine } from '@prisma/schema-engine-wasm';

/*
 * Prisma's schema engine (migrations, diffs) as WebAssembly, so no native binary has to be
 * downloaded. The package's entry point imports the .wasm file as an ES module, which Node
 * cannot do; the module is instantiated here with the package's own JS glue instead.
 */

type EngineGlue = typeof import('@prisma/schema-engine-wasm/schema_engine_bg');

/** The part of the WebAssembly global used here (the project's lib settings do not declare it). */
interface WebAssemblyApi {
  instantiate(
    bytes: Uint8Array,
    imports: Record<string, Record<string, unknown>>,
  ): Promise<{ instance: { exports: Record<string, unknown> } }>;
}

export interface SchemaFile {
  /** A name for error messages, e.g. "schema.prisma". */
  readonly path: string;
  readonly content: string;
}

/**
 * The instantiated module is immutable code shared by every engine of the process, and
 * instantiating it takes a second; hence this one module-level cache.
 */
let engineGlue: Promise<EngineGlue> | undefined;

function loadEngineGlue(): Promise<EngineGlue> {
  engineGlue ??= instantiateEngine().catch((error: unknown) => {
    engineGlue = undefined;
    throw error;
  });
  return engineGlue;
}

async function instantiateEngine(): Promise<EngineGlue> {
  const require = createRequire(import.meta.url);
  const gluePath = require.resolve('@prisma/schema-engine-wasm/schema_engine_bg');
  const glue: EngineGlue = await import('@prisma/schema-engine-wasm/schema_engine_bg');
  const wasmBytes = await readFile(gluePath.replace(/\.js$/, '.wasm'));
  const imports: Record<string, unknown> = { ...glue };
  // The engine arms a 10 s timer per request that would keep a finished CLI (or test) alive.
  for (const name of Object.keys(glue).filter((key) => key.startsWith('__wbg_setTimeout_'))) {
    imports[name] = (callback: () => void, milliseconds: number) =>
      setTimeout(callback, milliseconds >>> 0).unref();
  }
  const webAssembly = (globalThis as unknown as { WebAssembly: WebAssemblyApi }).WebAssembly;
  const { instance } = await webAssembly.instantiate(wasmBytes, {
    './schema_engine_bg.js': imports,
  });
  glue.__wbg_set_wasm(instance.exports);
  (instance.exports['__wbindgen_start'] as () => void)();
  return glue;
}

/**
 * Runs `work` with a schema engine connected through `adapterFactory`, then frees the
 * engine and disposes every connection it opened (the engine itself never does, and an
 * open pool keeps Node running).
 */
export async function withSchemaEngine<T>(
  adapterFactory: SqlMigrationAwareDriverAdapterFactory,
  schemaFiles: readonly SchemaFile[],
  work: (engine: SchemaEngine) => Promise<T>,
): Promise<T> {
  if (schemaFiles.length === 0) {
    // The engine panics (and leaves the wasm instance unusable) on an empty list.
    throw new Error('the schema engine needs at least one schema file');
  }
  const glue = await loadEngineGlue();
  const tracked = new DisposingAdapterFactory(adapterFactory);
  const engine = await glue.SchemaEngine.new(
    { datamodels: schemaFiles.map((file) => [file.path, file.content]) },
    () => {}, // the engine's own log lines: nothing in them that its errors do not say
    bindMigrationAwareSqlAdapterFactory(tracked),
  );
  try {
    return await work(engine);
  } finally {
    engine.free();
    await tracked.disposeAll();
  }
}

class DisposingAdapterFactory implements SqlMigrationAwareDriverAdapterFactory {
  readonly provider = 'postgres';
  readonly adapterName: string;
  private readonly opened: SqlDriverAdapter[] = [];

  constructor(private readonly inner: SqlMigrationAwareDriverAdapterFactory) {
    this.adapterName = inner.adapterName;
  }

  async connect(): Promise<SqlDriverAdapter> {
    return this.remember(await this.inner.connect());
  }

  async connectToShadowDb(): Promise<SqlDriverAdapter> {
    return this.remember(await this.inner.connectToShadowDb());
  }

  async disposeAll(): Promise<void> {
    const adapters = this.opened.splice(0);
    await Promise.all(adapters.map((adapter) => adapter.dispose()));
  }

  private remember(adapter: SqlDriverAdapter): SqlDriverAdapter {
    this.opened.push(adapter);
    return adapter;
  }
}

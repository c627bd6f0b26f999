import { GraphQLSchemaHost } from '@nestjs/graphql';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createControlPlane } from './control-plane.js';
import { EMBEDDED_DATABASE_SUBDIR } from './database/index.js';
import { committedSchemaPath, printSchemaSdl } from './graphql/schema-sdl.js';

/**
 * `node dist/schema-cli.js write` regenerates docs/schema.graphql from the resolvers;
 * `check` exits 1 when the committed file differs (the control-plane tests check the same).
 * The schema is built by starting a control plane on a throwaway embedded database.
 */
async function generateSdl(): Promise<string> {
  const dataDir = await mkdtemp(join(tmpdir(), 'gpushards-schema-'));
  const silent = new Writable({ write: (_chunk, _encoding, done) => done() });
  try {
    const controlPlane = await createControlPlane({
      dataDir,
      // Throwaway: no fsync.
      database: {
        embeddedDataDir: join(dataDir, EMBEDDED_DATABASE_SUBDIR),
        embeddedDurable: false,
      },
      port: 0,
      logLevel: 'silent',
      operatorOutput: silent,
    });
    try {
      return printSchemaSdl(controlPlane.app.get(GraphQLSchemaHost).schema);
    } finally {
      await controlPlane.close();
    }
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}

async function main(mode: string | undefined): Promise<number> {
  if (mode !== 'write' && mode !== 'check') {
    process.stderr.write('usage: node dist/schema-cli.js write|check\n');
    return 2;
  }
  const path = committedSchemaPath();
  const sdl = await generateSdl();
  if (mode === 'write') {
    await writeFile(path, sdl);
    process.stdout.write(`wrote ${path}\n`);
    return 0;
  }
  const committed = await readFile(path, 'utf8').catch(() => '');
  if (committed === sdl) {
    process.stdout.write(`${path} is up to date\n`);
    return 0;
  }
  process.stderr.write(
    `${path} differs from the schema the code generates: run \`node apps/control-plane/dist/schema-cli.js write\` and commit it\n`,
  );
  return 1;
}

process.exitCode = await main(process.argv[2]);

import { relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { databaseConfigFromEnv, describeDatabase } from '../database-config.js';
import { findPrismaFolder } from './migration-files.js';
import {
  createMigration,
  diffMigrationsToSchema,
  markMigrationRolledBack,
  migrateDatabase,
  migrationStatusOf,
  withMigrationAdapter,
} from './migrate.js';

const USAGE = `usage: node apps/control-plane/dist/database/migrations/cli.js <command>

  new <name>  write prisma/migrations/<timestamp>_<name>/migration.sql: what schema.prisma
              adds to the existing migrations (then append any hand-written SQL)
  deploy      apply pending migrations to the database
  status      list pending, failed and unknown migrations of the database (exit 1 unless
              up to date)
  check       exit 1 when schema.prisma and the migrations differ, printing the SQL
  rolled-back <name>
              mark a failed migration rolled back (after repairing the database by
              hand), so that deploy runs it again

The database: PostgreSQL at DATABASE_URL when set, else the embedded database in
$GPUSHARDS_DATA_DIR/database (default .gpushards/database under the current folder).`;

/** Runs one command; returns the process exit code. */
export async function runMigrationCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  print: (line: string) => void = (line) => console.log(line),
): Promise<number> {
  const [command, ...rest] = args;
  const folder = findPrismaFolder();
  switch (command) {
    case 'new': {
      const [name] = rest;
      if (name === undefined || rest.length !== 1) {
        print(USAGE);
        return 2;
      }
      const created = await createMigration(name, folder);
      if (created === undefined) {
        print('schema.prisma and the migrations agree: no migration written');
        return 0;
      }
      print(`wrote ${relative(process.cwd(), created.path)}`);
      print('append hand-written SQL (CHECK constraints, data changes) to it before committing');
      return 0;
    }
    case 'deploy': {
      const config = databaseConfigFromEnv(env);
      const applied = await migrateDatabase(config, folder);
      print(
        applied.length === 0
          ? `${describeDatabase(config)}: no pending migrations`
          : `${describeDatabase(config)}: applied ${applied.join(', ')}`,
      );
      return 0;
    }
    case 'status': {
      const config = databaseConfigFromEnv(env);
      const status = await migrationStatusOf(config, folder);
      print(`${describeDatabase(config)}:`);
      if (status.upToDate) print('  up to date');
      for (const name of status.pending) print(`  pending      ${name}`);
      for (const name of status.failed) print(`  failed       ${name}`);
      for (const name of status.edited)
        print(`  edited       ${name} (changed after it was applied)`);
      for (const name of status.notInFolder) print(`  not in folder ${name}`);
      return status.upToDate ? 0 : 1;
    }
    case 'check': {
      const sql = await diffMigrationsToSchema(folder);
      if (sql === '') {
        print('schema.prisma and the migrations agree');
        return 0;
      }
      print(
        'schema.prisma differs from the migrations; create one with `new <name>`. Missing SQL:',
      );
      print(sql);
      return 1;
    }
    case 'rolled-back': {
      const [name] = rest;
      if (name === undefined || rest.length !== 1) {
        print(USAGE);
        return 2;
      }
      await withMigrationAdapter(databaseConfigFromEnv(env), (adapter) =>
        markMigrationRolledBack(adapter, name, folder),
      );
      print(`${name} marked rolled back; deploy will run it again`);
      return 0;
    }
    default:
      print(USAGE);
      return 2;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  runMigrationCli(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : error);
      process.exitCode = 1;
    },
  );
}

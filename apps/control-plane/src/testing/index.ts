// Test support for every suite: throwaway PostgreSQL servers and migrated test databases.
// Name files here so that `node --test dist/` does not take them for tests: no "test-" prefix
// and no ".test", "-test" or "_test" suffix.

export {
  startPostgres,
  type PostgresServer,
  type StartPostgresOptions,
} from './postgres-server.js';
export {
  createTestDatabase,
  TEST_DATABASE_KINDS,
  type TestDatabase,
  type TestDatabaseKind,
  type TestDatabaseOptions,
} from './throwaway-database.js';

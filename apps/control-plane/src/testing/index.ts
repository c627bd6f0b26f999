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
} from './test-database.js';

export { openDatabaseBackend, type DatabaseBackend } from './database-backend.js';
export {
  databaseConfigFromEnv,
  DatabaseConfigError,
  DEFAULT_DATA_DIR,
  DEFAULT_POOL_SIZE,
  describeDatabase,
  EMBEDDED_DATABASE_SUBDIR,
  type DatabaseConfig,
} from './database-config.js';
export { DatabaseModule } from './database.module.js';
export {
  isDatabaseBusy,
  isUniqueViolation,
  postgresErrorCode,
  violatedCheckConstraint,
} from './database-errors.js';
export {
  applyPendingMigrations,
  createMigration,
  diffMigrationsToSchema,
  markMigrationRolledBack,
  migrateDatabase,
  MigrationError,
  migrationStatusOf,
  readMigrationStatus,
  withMigrationAdapter,
  type MigrationStatus,
} from './migrations/migrate.js';
export {
  findPrismaFolder,
  prismaFolderAt,
  type PrismaFolder,
} from './migrations/migration-files.js';
export { DirectSql, DirectSqlError, type RawSql } from './direct-sql.js';
export { DATABASE_CONFIG, PrismaService } from './prisma.service.js';
export { lockTeamForUpdate, TEAM_LOCK_SPACE } from './team-lock.js';
export * from './generated/client.js';

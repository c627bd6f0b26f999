import { Global, Module, type DynamicModule } from '@nestjs/common';
import { databaseConfigFromEnv, type DatabaseConfig } from './database-config.js';
import { DATABASE_CONFIG, PrismaService } from './prisma.service.js';

/**
 * Provides PrismaService everywhere. The database is opened and migrated during the
 * application's init (before it listens) and closed on shutdown (enable shutdown hooks).
 */
@Global()
@Module({})
export class DatabaseModule {
  /** `config` defaults to the environment (DATABASE_URL, GPUSHARDS_DATA_DIR, ...). */
  static forRoot(config: DatabaseConfig = databaseConfigFromEnv()): DynamicModule {
    return {
      module: DatabaseModule,
      providers: [{ provide: DATABASE_CONFIG, useValue: config }, PrismaService],
      exports: [PrismaService],
    };
  }
}

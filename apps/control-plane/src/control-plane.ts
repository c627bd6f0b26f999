import 'reflect-metadata';
import type { INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import type { DestinationStream } from 'pino';
import { openAgentLink, type AgentLinkOptions } from './agent-link/agent-link-options.js';
import { AppModule } from './app.module.js';
import {
  DEFAULT_HOST,
  DEFAULT_HOST_OFFLINE_SECONDS,
  DEFAULT_PORT,
  isHostOfflineSeconds,
  type ControlPlaneConfig,
} from './config/control-plane-config.js';
import type { IdentityConfig } from './config/identity-env.js';
import { DEFAULT_SECURITY_CONFIG, type SecurityConfig } from './config/api-limits.js';
import {
  isShardEventRetention,
  MAX_EVENTS_PER_SHARD,
  MAX_RETENTION_DAYS,
  type ShardEventRetention,
} from './config/shard-event-env.js';
import { EMBEDDED_DATABASE_SUBDIR, type DatabaseConfig } from './database/index.js';
import type { Clock } from './fleet/clock.js';
import { GRAPHQL_PATH } from './graphql/graphql-api.module.js';
import { useQueryPrecheck } from './graphql/query-precheck.js';
import { createHttpAdapter } from './http/http-adapter.js';
import { createLogger, PinoNestLogger, type LogLevel } from './logging/logger.js';
import type { ShardCommands } from './shards/shard-commands.js';

export interface ControlPlaneOptions {
  /** The data folder (admin token file; the embedded database unless `database` says otherwise). */
  readonly dataDir: string;
  /** Default: the embedded database in `<dataDir>/database`. */
  readonly database?: DatabaseConfig;
  /** Default 4000; 0 picks a free port. */
  readonly port?: number;
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default "info". */
  readonly logLevel?: LogLevel;
  /** Where JSON log lines go; default stdout. */
  readonly logDestination?: DestinationStream;
  /** Where the first admin token is printed; default process.stdout. */
  readonly operatorOutput?: NodeJS.WritableStream;
  /** Seconds without a heartbeat before a host is OFFLINE; default 60. */
  readonly hostOfflineSeconds?: number;
  /** The built team portal (apps/portal/dist), served at `/`. */
  readonly portalDir?: string;
  /** Default: the system clock (tests pass a ManualClock). */
  readonly clock?: Clock;
  /** How shard commands reach agents without a `link` (tests); neither: no agents, createShard answers NO_AGENTS. */
  readonly shardCommands?: ShardCommands;
  /**
   * How agents talk to this control plane: `{nats: {servers, auth}}`, or `{inProcess: hub}`
   * for agents in this process (InProcessAgentHub). None: agents cannot reach it.
   */
  readonly link?: AgentLinkOptions;
  /** API limits, endpoint switches, image allow-list; default DEFAULT_SECURITY_CONFIG. */
  readonly security?: Partial<SecurityConfig>;
  /** How much shard event history is kept; default DEFAULT_SHARD_EVENT_RETENTION. */
  readonly shardEventRetention?: ShardEventRetention;
  /** Sign-in through OpenID Connect (docs/identity.md); none: API tokens only. */
  readonly identity?: IdentityConfig;
}

export interface ControlPlane {
  readonly app: INestApplication;
  readonly config: ControlPlaneConfig;
  /** "http://127.0.0.1:4000" (the port actually bound). */
  readonly url: string;
  /** `${url}/graphql`; also the graphql-ws endpoint (with ws://). */
  readonly graphqlUrl: string;
  close(): Promise<void>;
}

/**
 * Starts a control plane in this process and waits until it listens: migrations applied, the
 * first admin token created if none exists. Used by main.ts, the one-box launcher and tests.
 */
export async function createControlPlane(options: ControlPlaneOptions): Promise<ControlPlane> {
  const dataDir = resolve(options.dataDir);
  const config: ControlPlaneConfig = {
    port: options.port ?? DEFAULT_PORT,
    host: options.host ?? DEFAULT_HOST,
    dataDir,
    database: options.database ?? { embeddedDataDir: join(dataDir, EMBEDDED_DATABASE_SUBDIR) },
    hostOfflineSeconds: options.hostOfflineSeconds ?? DEFAULT_HOST_OFFLINE_SECONDS,
    security: {
      ...DEFAULT_SECURITY_CONFIG,
      ...options.security,
      // Nothing could deliver a launch: createShard answers NO_AGENTS rather than recording
      // a shard that never starts.
      noAgents: (options.security?.noAgents ?? false) || (!options.link && !options.shardCommands),
    },
    ...(options.portalDir === undefined ? {} : { portalDir: resolve(options.portalDir) }),
    ...(options.shardEventRetention === undefined
      ? {}
      : { shardEventRetention: options.shardEventRetention }),
    ...(options.identity === undefined ? {} : { identity: options.identity }),
  };
  if (config.shardEventRetention && !isShardEventRetention(config.shardEventRetention)) {
    throw new RangeError(
      `shardEventRetention must keep 1 to ${MAX_EVENTS_PER_SHARD} events per shard for 1 to ${MAX_RETENTION_DAYS} days, not ${JSON.stringify(config.shardEventRetention)}`,
    );
  }
  if (!isHostOfflineSeconds(config.hostOfflineSeconds)) {
    throw new RangeError(
      `hostOfflineSeconds must be a whole number from 5 to 86400, not ${config.hostOfflineSeconds}`,
    );
  }
  if (options.link && options.shardCommands) {
    throw new TypeError('give createControlPlane a link or shardCommands, not both');
  }
  const logger = createLogger(options.logLevel ?? 'info', options.logDestination);
  const link = options.link ? await openAgentLink(options.link, logger) : undefined;
  const shardCommands = link?.commands ?? options.shardCommands;
  const httpAdapter = createHttpAdapter();
  if (config.security.enforceLimits) {
    useQueryPrecheck(httpAdapter.getInstance(), config.security.limits, GRAPHQL_PATH);
  }
  let app: NestFastifyApplication;
  try {
    app = await NestFactory.create<NestFastifyApplication>(
      AppModule.forRoot({
        config,
        logger,
        operatorOutput: options.operatorOutput ?? process.stdout,
        ...(options.clock ? { clock: options.clock } : {}),
        ...(shardCommands ? { shardCommands } : {}),
        ...(link ? { agentTransport: link.transport } : {}),
        ...(link?.hostCredentials ? { hostCredentials: link.hostCredentials } : {}),
      }),
      httpAdapter,
      { logger: new PinoNestLogger(logger), bodyParser: false, abortOnError: false },
    );
  } catch (error) {
    await link?.close();
    throw error;
  }
  const close = async (): Promise<void> => {
    try {
      await app.close();
    } finally {
      await link?.close();
    }
  };
  try {
    await app.listen(config.port, config.host);
  } catch (error) {
    await close();
    throw error;
  }
  const address = app.getHttpServer().address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  logger.info(
    { url, dataDir, database: config.database.url ? 'postgres' : 'pglite' },
    'control plane listening',
  );
  return {
    app,
    config,
    url,
    graphqlUrl: url + GRAPHQL_PATH,
    close,
  };
}

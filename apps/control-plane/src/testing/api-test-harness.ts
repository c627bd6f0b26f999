import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { ADMIN_TOKEN_FILE } from '../auth/admin-token.bootstrap.js';
import {
  createControlPlane,
  type ControlPlane,
  type ControlPlaneOptions,
} from '../control-plane.js';
import { PrismaService } from '../database/index.js';
import { FakeShardCommands } from './fake-shard-commands.js';
import { createTestDatabase, type PostgresServer, type TestDatabaseKind } from './index.js';

/** One GraphQL response as the client sees it. */
export interface GraphqlResponse<T = unknown> {
  readonly status: number;
  readonly data?: T | null;
  readonly errors?: readonly {
    readonly message: string;
    readonly path?: readonly (string | number)[];
    readonly extensions?: Record<string, unknown> & { code?: string };
  }[];
}

/**
 * A control plane started in this process on a fresh database of `kind`, for tests that go
 * through HTTP like a client: `harness.graphql(query, variables, token)`. The database is
 * inspected through the app's own PrismaService (PGlite allows one connection only).
 */
export interface ApiTestHarness {
  readonly kind: TestDatabaseKind;
  readonly controlPlane: ControlPlane;
  readonly prisma: PrismaService;
  readonly dataDir: string;
  /** The first admin token, as written to <dataDir>/admin-token. */
  readonly adminToken: string;
  /** Everything the control plane printed for the operator. */
  operatorOutput(): string;
  graphql<T = Record<string, unknown>>(
    query: string,
    variables?: Record<string, unknown>,
    token?: string | null,
  ): Promise<GraphqlResponse<T>>;
  close(): Promise<void>;
}

export interface ApiTestHarnessOptions {
  /** PostgreSQL server to create the database on (one per test file); required for 'postgres'. */
  readonly server?: PostgresServer;
  /** Passed on to createControlPlane (a ManualClock, a fake agent link, ...). */
  readonly controlPlane?: Pick<
    ControlPlaneOptions,
    | 'clock'
    | 'shardCommands'
    | 'hostOfflineSeconds'
    | 'security'
    | 'logLevel'
    | 'logDestination'
    | 'shardEventRetention'
    | 'identity'
  >;
}

export async function startApiTestHarness(
  kind: TestDatabaseKind,
  options: ApiTestHarnessOptions = {},
): Promise<ApiTestHarness> {
  const database = await createTestDatabase(kind, options.server ? { server: options.server } : {});
  // The control plane opens the database itself; an embedded one may be open only once.
  await database.prisma.close();
  const dataDir = await mkdtemp(join(tmpdir(), 'gpushards-cp-test-'));
  let printed = '';
  const operatorOutput = new Writable({
    write(chunk: Buffer, _encoding, done) {
      printed += chunk.toString();
      done();
    },
  });
  const controlPlane = await createControlPlane({
    dataDir,
    database: database.config,
    port: 0,
    logLevel: 'silent',
    operatorOutput,
    // Tests that do not read the commands still need a link that takes them.
    shardCommands: new FakeShardCommands(),
    ...options.controlPlane,
  });
  const adminToken = (await readFile(join(dataDir, ADMIN_TOKEN_FILE), 'utf8')).trim();
  return {
    kind,
    controlPlane,
    prisma: controlPlane.app.get(PrismaService),
    dataDir,
    adminToken,
    operatorOutput: () => printed,
    graphql: (query, variables = {}, token = adminToken) =>
      postGraphql(controlPlane.graphqlUrl, query, variables, token),
    close: async () => {
      await controlPlane.close();
      await database.cleanup();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export async function postGraphql<T>(
  url: string,
  query: string,
  variables: Record<string, unknown>,
  token: string | null,
): Promise<GraphqlResponse<T>> {
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(token === null ? {} : { authorization: `Bearer ${token}` }),
    },
    body: JSON.stringify({ query, variables }),
  });
  const body = (await response.json()) as Omit<GraphqlResponse<T>, 'status'>;
  return { status: response.status, ...body };
}

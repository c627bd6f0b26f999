import { after, before, describe } from 'node:test';

import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { startApiTestHarness, type ApiTestHarness } from './api-test-harness.js';
import { FakeShardCommands } from './fake-shard-commands.js';
import {
  createTestTeam,
  GiB,
  registerRequest,
  SHARD_FIELDS,
  type TestTeam,
} from './fleet-fixtures.js';
import { startPostgres, TEST_DATABASE_KINDS, type PostgresServer } from './index.js';

// The setup the shard API tests (src/shards/shards-*.test.ts) share: each file runs its tests
// through HTTP GraphQL (and graphql-ws) on PostgreSQL and on PGlite, against one control plane
// per database kind whose launch commands go to a FakeShardCommands.

export const SHARD = `query ($id: ID!) { shard(id: $id) { ${SHARD_FIELDS} team { id name } host { id name } } }`;
export const SHARDS = `query ($teamId: ID, $states: [ShardState!], $hostId: ID, $first: Int, $after: String) {
  shards(teamId: $teamId, states: $states, hostId: $hostId, first: $first, after: $after) {
    edges { cursor node { id name state teamId hostId } }
    pageInfo { hasNextPage hasPreviousPage endCursor }
  }
}`;
export const STOP = `mutation ($id: ID!, $grace: Int) { stopShard(id: $id, graceSeconds: $grace) { ${SHARD_FIELDS} } }`;
export const DELETE = `mutation ($id: ID!) { deleteShard(id: $id) { ${SHARD_FIELDS} } }`;
export const RESIZE = `mutation ($id: ID!, $size: String!) { resizeShard(id: $id, memoryPerGpu: $size) { ${SHARD_FIELDS} } }`;
export const PREVIEW = `query ($input: PlacementInput!) {
  placementPreview(input: $input) {
    fits hostId hostName gpuUuids reservedPerGpu { bytes human } message quotaProblem
    hosts { hostId hostName kind reason }
  }
}`;
export const HOST_SHARDS = `query ($id: ID!) { host(id: $id) { id shards { edges { node { id teamId } } } } }`;

export const INJECTION = "x'; DROP TABLE shard; --";

/** What a test of the shard API works with; set before its first test runs. */
export interface ShardsApi {
  readonly h: ApiTestHarness;
  readonly fleet: AgentReportsService;
  readonly commands: FakeShardCommands;
  readonly alpha: TestTeam;
  readonly beta: TestTeam;
  /** A host of its own for a test, reachable with hostSelector { pool: <pool> }. */
  readonly registerPool: (
    pool: string,
    hostIds: string[],
    gpus?: number,
    gpuBytes?: number,
  ) => Promise<void>;
}

/**
 * Declares `tests` once per database kind (describe "shards <topic> on <kind>"), with a
 * PostgreSQL server for the file, and per kind a control plane with one 4-GPU L4 host (pool
 * "l4"; the largest host, with the only non-H100 model) and the teams alpha and beta.
 */
export function describeShardsApi(topic: string, tests: (api: ShardsApi) => void): void {
  let postgres: PostgresServer | undefined;
  before(async () => {
    postgres = await startPostgres();
  });
  after(async () => {
    await postgres?.stop();
  });

  for (const kind of TEST_DATABASE_KINDS) {
    describe(`shards ${topic} on ${kind}`, () => {
      const api = {
        commands: new FakeShardCommands(),
        async registerPool(pool: string, hostIds: string[], gpus = 2, gpuBytes = 80 * GiB) {
          for (const hostId of hostIds) {
            await api.fleet.registerHost(
              registerRequest(hostId, { gpus, gpuBytes, labels: { pool } }),
            );
          }
        },
      } as { -readonly [K in keyof ShardsApi]: ShardsApi[K] };

      before(async () => {
        api.h = await startApiTestHarness(kind, {
          ...(postgres ? { server: postgres } : {}),
          controlPlane: { shardCommands: api.commands },
        });
        api.fleet = api.h.controlPlane.app.get(AgentReportsService);
        // The largest host has 4 GPUs; models: H100 and L4.
        await api.fleet.registerHost(
          registerRequest('base-l4', {
            gpus: 4,
            gpuBytes: 24 * GiB,
            model: 'NVIDIA L4',
            labels: { pool: 'l4' },
          }),
        );
        api.alpha = await createTestTeam(api.h, 'alpha');
        api.beta = await createTestTeam(api.h, 'beta');
      });
      after(async () => {
        await api.h?.close();
      });

      tests(api);
    });
  }
}

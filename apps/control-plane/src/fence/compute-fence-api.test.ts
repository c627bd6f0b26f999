import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { UngovernedComputeMessage } from '@gpushards/protocol';
import { createClient } from 'graphql-ws';
import { WebSocket } from 'ws';
import { ShardEventBus } from '../events/shard-event-bus.js';
import { AgentReportsService } from '../fleet/agent-reports.service.js';
import { startApiTestHarness, type ApiTestHarness } from '../testing/api-test-harness.js';
import {
  assertOk,
  createShard,
  createTestTeam,
  gpuUuidOf,
  heartbeat,
  registerRequest,
  type TestTeam,
} from '../testing/fleet-fixtures.js';
import { FenceService } from './fence.service.js';

/**
 * The compute fence in the API: a heartbeat's ungovernedCompute finding becomes an
 * UNGOVERNED_COMPUTE shardEvents event that says in words what happened, and a metric. Nothing
 * here depends on the database kind (no row is written), so PGlite only.
 */

const EVENTS = `subscription {
  shardEvents {
    kind state previousState shard { id }
    ungovernedCompute {
      gpuUuid action pid smPercent pids busyPercent samples busySamples thresholdPercent
      windowSeconds lastKernelAt killedPids error message
    }
  }
}`;

interface Heard {
  kind: string;
  state: string;
  previousState: string | null;
  shard: { id: string };
  ungovernedCompute: Record<string, unknown> | null;
}

describe('compute fence in the API', () => {
  let h: ApiTestHarness;
  let team: TestTeam;

  before(async () => {
    h = await startApiTestHarness('pglite');
    team = await createTestTeam(h, 'compute-fence-team');
  });
  after(async () => {
    await h?.close();
  });

  it(
    'an ungovernedCompute finding is an UNGOVERNED_COMPUTE event saying what ran outside the ledger, and a metric; another host cannot report it',
    { timeout: 60_000 },
    async () => {
      const fleet = h.controlPlane.app.get(AgentReportsService);
      await fleet.registerHost(registerRequest('cf-1', { gpus: 1, labels: { pool: 'cf' } }));
      await fleet.registerHost(registerRequest('cf-2', { gpus: 1, labels: { pool: 'other' } }));
      const shard = assertOk(
        await createShard(h, team.member, { hostSelector: [{ key: 'pool', value: 'cf' }] }),
      ).createShard;
      const gpu = gpuUuidOf('cf-1', 0);

      // Synchronise on the subscription reaching the bus, and on the first message: the bus's
      // subscribe is wrapped to say when the server has registered the listener.
      const bus = h.controlPlane.app.get(ShardEventBus);
      const subscribe = bus.subscribe.bind(bus);
      const registered = new Promise<void>((resolve) => {
        bus.subscribe = (accept) => {
          const events = subscribe(accept);
          resolve();
          return events;
        };
      });
      const heard: Heard[] = [];
      const errors: unknown[] = [];
      let answered = (): void => undefined;
      const firstAnswer = new Promise<void>((resolve) => (answered = resolve));
      const client = createClient({
        url: h.controlPlane.graphqlUrl.replace(/^http/, 'ws'),
        webSocketImpl: WebSocket,
        connectionParams: { Authorization: `Bearer ${team.viewer}` },
        retryAttempts: 0,
      });
      client.subscribe<{ shardEvents: Heard }>(
        { query: EVENTS },
        {
          next: (message) => {
            if (message.data?.shardEvents) heard.push(message.data.shardEvents);
            if (message.errors) errors.push(...message.errors);
            answered();
          },
          error: (error) => {
            errors.push(error);
            answered();
          },
          complete: () => undefined,
        },
      );
      try {
        await registered;
        const at = new Date('2030-01-01T00:00:10Z');
        const finding = (
          extra: Partial<UngovernedComputeMessage> = {},
        ): UngovernedComputeMessage => ({
          shardId: shard.id,
          gpuUuid: gpu,
          action: 'kill',
          pid: 4242,
          smPercent: 67.6,
          pids: [4242, 4243],
          busyPercent: 71.2,
          samples: 10,
          busySamples: 9,
          thresholdPercent: 10,
          windowSeconds: 5.02,
          lastKernelSeconds: 12.5,
          killedPids: [4242, 4243],
          at: at.toISOString(),
          ...extra,
        });
        const fence = h.controlPlane.app.get(FenceService);
        // cf-2 runs no such shard: its report is ignored.
        await fence.recordFindings('cf-2', {
          ...heartbeat('cf-2', at),
          ungovernedCompute: [finding({ action: 'report' })],
        });
        await fence.recordFindings('cf-1', {
          ...heartbeat('cf-1', at),
          ungovernedCompute: [finding()],
        });
        await firstAnswer;
        assert.deepEqual(errors, []);
        assert.equal(heard.length, 1, JSON.stringify(heard));
        const [event] = heard;
        assert.equal(event!.kind, 'UNGOVERNED_COMPUTE');
        assert.equal(event!.shard.id, shard.id);
        assert.equal(event!.state, event!.previousState, 'no state change');
        assert.deepEqual(event!.ungovernedCompute, {
          gpuUuid: gpu,
          action: 'KILL',
          pid: 4242,
          smPercent: 67.6,
          pids: [4242, 4243],
          busyPercent: 71.2,
          samples: 10,
          busySamples: 9,
          thresholdPercent: 10,
          windowSeconds: 5.02,
          lastKernelAt: '2029-12-31T23:59:57.500Z',
          killedPids: [4242, 4243],
          error: null,
          message:
            'ungoverned GPU work: pid 4242 ran kernels outside the compute ledger (smUtil 68 % over 5 s)',
        });
      } finally {
        bus.subscribe = subscribe;
        await client.dispose();
      }
      const metrics = await (await fetch(`${h.controlPlane.url}/metrics`)).text();
      assert.match(
        metrics,
        /gpushards_compute_fence_findings_total\{action="kill",team="compute-fence-team"\} 1\n/,
      );
      assert.doesNotMatch(metrics, /gpushards_compute_fence_findings_total\{action="report"/);
    },
  );
});

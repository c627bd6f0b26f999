import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { LinkUnavailableError } from '@gpushards/agent';
import { docker, shardContainers } from '../../../apps/agent/dist/testing/docker.js';
import { InProcessAgentHub } from '@gpushards/control-plane';
import { TEST_DATABASE_KINDS } from '../../../apps/control-plane/dist/testing/index.js';

import { CREATE_SHARD, SHARD, Stack, waitFor, type ShardView } from './support/stack.js';

/**
 * The issue's own case: the agent killed after `docker create` and before `docker start`
 * (which left the shard PLACED or STARTING for ever, its container `created`, its reservation
 * held). On each database, with the one-box wiring (control plane and agent in one process)
 * and the Docker engine: restarted, the agent runs the shard in one new container.
 */
for (const kind of TEST_DATABASE_KINDS) {
  describe(`an agent killed between docker create and docker start, on ${kind}`, () => {
    const host = `it-cs-${kind}-${process.pid}`;
    let stack: Stack;
    let hub: InProcessAgentHub;
    let teamId: string;

    const startAgent = () => stack.startAgent(host, { custom: hub.connectAgent(host) });
    const shard = async (id: string) =>
      (await stack.graphql<{ shard: ShardView }>(SHARD, { id })).shard;

    before(async () => {
      stack = await Stack.start(`create-start-${kind}`, kind);
      hub = new InProcessAgentHub({
        unavailableError: (message) => new LinkUnavailableError(message),
      });
      await stack.startControlPlane({ inProcess: hub });
      await startAgent();
      teamId = await stack.createTeam('crash');
    });

    after(async () => {
      await stack?.close([host]);
    });

    it('restarted, the agent replaces the never-started container and the shard RUNS; one container, its reservation held once', async () => {
      await stack.stopAgent(host);
      const { createShard } = await stack.graphql<{
        createShard: { id: string; state: string; hostId: string };
      }>(CREATE_SHARD, {
        input: {
          teamId,
          name: 'created-never-started',
          image: stack.probeImage,
          command: ['/cuda-probe', 'hold', String(64 * 1024 * 1024)],
          memoryPerGpu: '1g',
        },
      });
      assert.deepEqual([createShard.state, createShard.hostId], ['PLACED', host]);
      const placed = await shard(createShard.id);
      // What the kill leaves: the shard's container, with the agent's name and labels,
      // created and never started.
      const created = docker(
        'create',
        '--name',
        `gpushards-${host}-${placed.id}`,
        ...['--label', 'io.gpushards.managed=true'],
        ...['--label', `io.gpushards.shard=${placed.id}`],
        ...['--label', `io.gpushards.team=${teamId}`],
        ...['--label', `io.gpushards.host=${host}`],
        ...['--label', `io.gpushards.gpus=${placed.gpus.map((g) => g.gpuUuid).join(',')}`],
        stack.probeImage,
        ...['/cuda-probe', 'hold', '1'],
      );
      assert.deepEqual(
        shardContainers(host).map((c) => [c.id, c.state]),
        [[created, 'created']],
      );

      await startAgent();
      const running = await waitFor(`shard ${placed.id} RUNNING`, async () => {
        const view = await shard(placed.id);
        return view.state === 'RUNNING' ? view : undefined;
      });
      const containers = shardContainers(host);
      assert.deepEqual(
        containers.map((c) => [c.shardId, c.id, c.state]),
        [[placed.id, running.containerId, 'running']],
        'one container, running, and not the one that never started',
      );
      assert.notEqual(running.containerId, created);
      const live = running.gpus.filter((gpu) => gpu.releasedAt === null);
      assert.equal(live.length, 1, 'its one reservation, held once');
      const { host: view } = await stack.graphql<{
        host: { memory: { reserved: { bytes: string } } };
      }>(`query ($id: ID!) { host(id: $id) { memory { reserved { bytes } } } }`, { id: host });
      assert.equal(view.memory.reserved.bytes, running.limitPerGpu.bytes);
    });
  });
}

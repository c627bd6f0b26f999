import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { LinkUnavailableError } from '@gpushards/agent';
import { docker, shardContainers } from '../../../apps/agent/dist/testing/docker.js';
import { InProcessAgentHub } from '@gpushards/control-plane';

import { CREATE_SHARD, GiB, MiB, SHARD, Stack, waitFor, type ShardView } from './support/stack.js';

const HOST = `it-inproc-${process.pid}`;
const CONTEXT = 300 * MiB;

/**
 * The one-box wiring: control plane and agent in one process, linked by an InProcessAgentHub
 * (no broker), on a real PostgreSQL and the Docker engine. The same flows as over NATS.
 */
describe('control plane and agent in one process (InProcessAgentHub)', () => {
  let stack: Stack;
  let hub: InProcessAgentHub;
  let teamId: string;
  let shardId: string;

  const shard = async (id: string) =>
    (await stack.graphql<{ shard: ShardView }>(SHARD, { id })).shard;
  const waitForState = (id: string, state: string) =>
    waitFor(`shard ${id} ${state}`, async () => {
      const view = await shard(id);
      return view.state === state ? view : undefined;
    });
  const registrations = () =>
    stack.count(
      `SELECT count(*) AS n FROM audit_event WHERE action = 'host.register' AND target_id = $1`,
      [HOST],
    );

  before(async () => {
    stack = await Stack.start('inproc');
    hub = new InProcessAgentHub({
      unavailableError: (message) => new LinkUnavailableError(message),
    });
    await stack.startControlPlane({ inProcess: hub });
    await stack.startAgent(HOST, { custom: hub.connectAgent(HOST) });
    teamId = await stack.createTeam('vision');
  });

  after(async () => {
    await stack?.close([HOST]);
  });

  it('the agent registers: its host and GPUs appear in hosts', async () => {
    const { host } = await stack.graphql<{ host: { state: string; gpus: { model: string }[] } }>(
      `query ($id: ID!) { host(id: $id) { state gpus { model } } }`,
      { id: HOST },
    );
    assert.deepEqual(host, {
      state: 'ONLINE',
      gpus: [{ model: 'Test GPU' }, { model: 'Test GPU' }],
    });
  });

  it('createShard: launched with its cap, enforced by the interposer', async () => {
    const { createShard } = await stack.graphql<{ createShard: { id: string } }>(CREATE_SHARD, {
      input: {
        teamId,
        name: 'probe',
        image: stack.probeImage,
        command: ['/cuda-probe', 'hold', String(256 * MiB)],
        memoryPerGpu: '1g',
      },
    });
    shardId = createShard.id;
    const running = await waitForState(shardId, 'RUNNING');
    assert.equal(running.limitPerGpu.bytes, String(GiB + CONTEXT));
    const containerId = running.containerId!;
    await waitFor('the probe to hold its memory', () =>
      docker('logs', containerId).includes('{"result":0}') ? true : undefined,
    );
    const allocate = (bytes: number) =>
      JSON.parse(docker('exec', containerId, '/cuda-probe', 'alloc', String(bytes))).result;
    assert.equal(allocate(GiB), 2, 'CUDA_ERROR_OUT_OF_MEMORY past the cap');
    assert.equal(allocate(128 * MiB), 0);
  });

  it('heartbeats: the shard usage and usage samples', async () => {
    await waitFor('the shard usage', async () =>
      (await shard(shardId)).gpus[0]?.used.bytes === String(CONTEXT + 256 * MiB) ? true : undefined,
    );
    assert.ok(
      (await stack.count('SELECT count(*) AS n FROM usage_sample WHERE shard_id = $1', [shardId])) >
        0,
    );
  });

  it('stopShard: STOPPED, the container kept and stopped', async () => {
    await stack.graphql(`mutation ($id: ID!) { stopShard(id: $id, graceSeconds: 1) { state } }`, {
      id: shardId,
    });
    await waitForState(shardId, 'STOPPED');
    assert.deepEqual(
      shardContainers(HOST).map((container) => [container.shardId, container.state]),
      [[shardId, 'exited']],
    );
  });

  it('a restarted control plane: the agent registers again and commands reach it', async () => {
    const before = await registrations();
    await stack.stopControlPlane();
    await stack.startControlPlane({ inProcess: hub });
    await waitFor('the agent to register again', async () =>
      (await registrations()) === before + 1 ? true : undefined,
    );
    await stack.graphql(`mutation ($id: ID!) { deleteShard(id: $id) { state } }`, { id: shardId });
    await waitFor('the container to go', () =>
      shardContainers(HOST).length === 0 ? true : undefined,
    );
  });
});

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';

import type { Agent, NatsAuth } from '@gpushards/agent';
import { docker, shardContainers } from '../../../apps/agent/dist/testing/docker.js';
import {
  startNatsServer,
  type TestNatsServer,
} from '../../../apps/agent/dist/testing/nats-server.js';
import {
  PROTOCOL_VERSION,
  agentInboxPrefix,
  agentSubjects,
  decodeMessage,
  registerReplySchema,
  type Heartbeat,
  type RegisterRequest,
} from '@gpushards/protocol';
import { connect, nkeyAuthenticator, type NatsConnection } from '@nats-io/transport-node';

import { CREATE_SHARD, GiB, MiB, SHARD, Stack, waitFor, type ShardView } from './support/stack.js';

const HOST = `it-nats-${process.pid}`;
/** Registered by hand (made-up GPU UUIDs): the host a forged message names. */
const OTHER = `it-other-${process.pid}`;
/** What the fake libcuda charges for one CUDA context (the agent measures it). */
const CONTEXT = 300 * MiB;

/**
 * The control plane and a real agent over a real nats-server with deploy/nats's per-agent
 * nkey users: registration, heartbeats, the shard lifecycle down to the container and the
 * interposer, restarts of either side, and what the control plane does with messages it must
 * not believe.
 */
describe('control plane and agent over NATS', () => {
  let stack: Stack;
  let nats: TestNatsServer;
  let teamId: string;
  let agent: Agent;
  const clients: NatsConnection[] = [];

  const startControlPlane = () =>
    stack.startControlPlane({
      nats: { servers: [nats.url], auth: nats.controlPlane },
      commands: { timeoutMs: 3000, attempts: 2, retryDelayMs: 100 },
    });
  const startAgent = async () => {
    agent = await stack.startAgent(HOST, {
      nats: { servers: [nats.url], auth: nats.agent(HOST), requestTimeoutMs: 5000 },
    });
    return agent;
  };
  /** A bare NATS client logged in as `hostId`'s agent (its permissions, its inbox). */
  const clientOf = async (hostId: string): Promise<NatsConnection> => {
    const auth = nats.agent(hostId) as NatsAuth & { kind: 'nkey' };
    const client = await connect({
      servers: nats.url,
      inboxPrefix: agentInboxPrefix(hostId),
      authenticator: nkeyAuthenticator(
        new TextEncoder().encode(readFileSync(auth.seedFile, 'utf8').trim()),
      ),
    });
    clients.push(client);
    return client;
  };
  const shard = async (id: string) =>
    (await stack.graphql<{ shard: ShardView }>(SHARD, { id })).shard;
  const waitForState = (id: string, state: string) =>
    waitFor(`shard ${id} ${state}`, async () => {
      const view = await shard(id);
      return view.state === state ? view : undefined;
    });
  const createProbeShard = async (name: string, memoryPerGpu: string, holdBytes: number) =>
    (
      await stack.graphql<{ createShard: { id: string; state: string; hostId: string } }>(
        CREATE_SHARD,
        {
          input: {
            teamId,
            name,
            image: stack.probeImage,
            command: ['/cuda-probe', 'hold', String(holdBytes)],
            memoryPerGpu,
          },
        },
      )
    ).createShard;
  /** Runs one more CUDA process in the shard's container: the CUresult of allocating `bytes`. */
  const allocateIn = (containerId: string, bytes: number): number =>
    JSON.parse(docker('exec', containerId, '/cuda-probe', 'alloc', String(bytes))).result;
  const containersOf = (shardId: string) =>
    shardContainers(HOST).filter((c) => c.shardId === shardId);

  before(async () => {
    stack = await Stack.start('nats');
    nats = await startNatsServer([HOST, OTHER]);
    await startControlPlane();
    await startAgent();
    teamId = await stack.createTeam('vision');
  });

  after(async () => {
    for (const client of clients) await client.close();
    await stack?.close([HOST]);
    await nats?.stop();
  });

  it('an agent registers: its host and GPUs appear in hosts', async () => {
    const { hosts } = await stack.graphql<{
      hosts: {
        edges: {
          node: {
            id: string;
            state: string;
            simulated: boolean;
            contextOverhead: { bytes: string };
            gpus: { uuid: string; index: number; model: string; total: { bytes: string } }[];
          };
        }[];
      };
    }>(`query { hosts { edges { node {
          id state simulated contextOverhead { bytes } gpus { uuid index model total { bytes } }
        } } } }`);
    assert.deepEqual(
      hosts.edges.map((edge) => edge.node),
      [
        {
          id: HOST,
          state: 'ONLINE',
          simulated: true,
          contextOverhead: { bytes: String(CONTEXT) },
          gpus: agent.inventory.gpus.map((gpu) => ({
            uuid: gpu.uuid,
            index: gpu.index,
            model: 'Test GPU',
            total: { bytes: String(24 * GiB) },
          })),
        },
      ],
    );
  });

  let probe: { id: string; containerId: string };

  it('createShard: the agent launches it with its cap; the interposer refuses past it', async () => {
    const held = 512 * MiB;
    const created = await createProbeShard('probe', '1g', held);
    assert.equal(created.state, 'PLACED');
    assert.equal(created.hostId, HOST);
    const running = await waitForState(created.id, 'RUNNING');
    assert.equal(running.limitPerGpu.bytes, String(GiB + CONTEXT));
    const [container] = containersOf(created.id);
    assert.ok(container && container.state === 'running' && container.id === running.containerId);
    probe = { id: created.id, containerId: container.id };
    const env: string[] = JSON.parse(docker('inspect', container.id))[0].Config.Env;
    assert.ok(env.includes(`CUDA_DEVICE_MEMORY_LIMIT_0=${GiB + CONTEXT}`), env.join(' '));
    await waitFor('the probe to hold its memory', () =>
      docker('logs', container.id).includes('{"result":0}') ? true : undefined,
    );
    // Holding 300 MiB + 512 MiB of 1324 MiB: another context (300 MiB) and 768 MiB do not fit.
    assert.equal(allocateIn(container.id, 768 * MiB), 2, 'CUDA_ERROR_OUT_OF_MEMORY past the cap');
    assert.equal(allocateIn(container.id, 128 * MiB), 0, 'what fits under the cap is served');
  });

  it('heartbeats: used memory on the shard and the GPU, usage samples written', async () => {
    const used = String(CONTEXT + 512 * MiB);
    const view = await waitFor('the shard usage', async () => {
      const current = await shard(probe.id);
      return current.gpus[0]?.used.bytes === used ? current : undefined;
    });
    const { host } = await stack.graphql<{
      host: { gpus: { uuid: string; used: { bytes: string } }[] };
    }>(`query ($id: ID!) { host(id: $id) { gpus { uuid used { bytes } } } }`, { id: HOST });
    const gpu = host.gpus.find((candidate) => candidate.uuid === view.gpus[0]!.gpuUuid);
    assert.ok(Number(gpu?.used.bytes) >= Number(used), JSON.stringify(host));
    await waitFor('usage samples', async () =>
      (await stack.count('SELECT count(*) AS n FROM usage_sample WHERE shard_id = $1', [
        probe.id,
      ])) > 0
        ? true
        : undefined,
    );
  });

  it('resizeShard: the new cap reaches the running container', async () => {
    const { resizeShard } = await stack.graphql<{
      resizeShard: { limitPerGpu: { bytes: string } };
    }>(
      `mutation ($id: ID!) { resizeShard(id: $id, memoryPerGpu: "2g") { limitPerGpu { bytes } } }`,
      { id: probe.id },
    );
    assert.equal(resizeShard.limitPerGpu.bytes, String(2 * GiB + CONTEXT));
    await waitFor('768 MiB to fit under the new cap', () =>
      allocateIn(probe.containerId, 768 * MiB) === 0 ? true : undefined,
    );
  });

  it('stopShard: STOPPED, the container kept and stopped', async () => {
    await stack.graphql(`mutation ($id: ID!) { stopShard(id: $id, graceSeconds: 1) { state } }`, {
      id: probe.id,
    });
    const stopped = await waitForState(probe.id, 'STOPPED');
    assert.ok(
      stopped.gpus.every((gpu) => gpu.releasedAt !== null),
      'reservation released',
    );
    assert.deepEqual(
      containersOf(probe.id).map((c) => [c.id, c.state]),
      [[probe.containerId, 'exited']],
    );
  });

  it('deleteShard: DELETED, the container and its region folder removed', async () => {
    assert.ok(existsSync(stack.regionDir(HOST, probe.id)));
    await stack.graphql(`mutation ($id: ID!) { deleteShard(id: $id) { state } }`, { id: probe.id });
    await waitForState(probe.id, 'DELETED');
    await waitFor('the container and the region folder to go', () =>
      containersOf(probe.id).length === 0 && !existsSync(stack.regionDir(HOST, probe.id))
        ? true
        : undefined,
    );
  });

  let kept: { id: string; containerId: string };
  let lateLaunch: string;

  it('agent restart: running shards adopted, no duplicate; what it missed meanwhile converges, no orphan', async () => {
    const a = await createProbeShard('kept', '512m', 64 * MiB);
    const b = await createProbeShard('deleted-meanwhile', '512m', 64 * MiB);
    const aRunning = await waitForState(a.id, 'RUNNING');
    await waitForState(b.id, 'RUNNING');
    kept = { id: a.id, containerId: aRunning.containerId! };

    await stack.stopAgent(HOST);
    // Commands the agent cannot receive now: not delivered (logged); the database decides.
    await stack.graphql(`mutation ($id: ID!) { deleteShard(id: $id) { state } }`, { id: b.id });
    const c = await createProbeShard('created-meanwhile', '512m', 64 * MiB);
    lateLaunch = c.id;
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal((await shard(c.id)).state, 'PLACED');
    assert.equal(containersOf(c.id).length, 0);

    await startAgent();
    await waitForState(c.id, 'RUNNING');
    await waitFor('the deleted shard container to go', () =>
      containersOf(b.id).length === 0 ? true : undefined,
    );
    const containers = shardContainers(HOST)
      .map((container) => [container.shardId, container.state])
      .sort();
    assert.deepEqual(
      containers,
      [
        [a.id, 'running'],
        [c.id, 'running'],
      ].sort(),
    );
    assert.equal(containersOf(a.id)[0]!.id, kept.containerId, 'adopted, not relaunched');
    assert.equal((await shard(a.id)).state, 'RUNNING');
    assert.equal((await shard(b.id)).state, 'DELETED');
  });

  it('control-plane restart on the same database: the agent goes on with the new one, nothing relaunched', async () => {
    await stack.stopControlPlane();
    const restartedAt = Date.now();
    await startControlPlane();
    await waitFor('a heartbeat to the new control plane', async () => {
      const { host } = await stack.graphql<{ host: { lastHeartbeatAt: string } }>(
        `query ($id: ID!) { host(id: $id) { lastHeartbeatAt } }`,
        { id: HOST },
      );
      return Date.parse(host.lastHeartbeatAt) > restartedAt ? true : undefined;
    });
    await agent.reconcileNow();
    assert.deepEqual(
      [(await shard(kept.id)).state, (await shard(lateLaunch)).state],
      ['RUNNING', 'RUNNING'],
    );
    assert.equal(containersOf(kept.id)[0]!.id, kept.containerId);
    assert.equal(shardContainers(HOST).length, 2);
  });

  it("a control plane that starts settles what its predecessor left in flight at once, not at the agent's next reconcile", async () => {
    await stack.stopControlPlane();
    // What a control plane killed mid-flight leaves: a shard still STARTING whose RUNNING
    // event went to no one, and a stop committed (STOPPING) whose command was never sent.
    await stack.execute(`UPDATE shard SET state = 'STARTING' WHERE id = $1`, [kept.id]);
    await stack.execute(`UPDATE shard SET state = 'STOPPING' WHERE id = $1`, [lateLaunch]);
    await startControlPlane();
    // The agent reconciles once an hour here (Stack): only the start can settle them.
    await waitForState(kept.id, 'RUNNING');
    await waitForState(lateLaunch, 'STOPPED');
    assert.equal(containersOf(kept.id)[0]!.id, kept.containerId, 'the same container');
    assert.equal(containersOf(kept.id)[0]!.state, 'running');
    assert.equal(containersOf(lateLaunch)[0]!.state, 'exited');
    assert.equal(shardContainers(HOST).length, 2);
  });

  it('a container that exits while no control plane listens: the one that starts asks the agent to reconcile, and the shard is EXITED at once', async () => {
    const shardId = (await createProbeShard('exits-unheard', '512m', 64 * MiB)).id;
    const { containerId } = await waitForState(shardId, 'RUNNING');
    // A listener in the control plane's place, to see the agent's EXITED event go to no one.
    const auth = nats.controlPlane as NatsAuth & { kind: 'nkey' };
    const listener = await connect({
      servers: nats.url,
      authenticator: nkeyAuthenticator(
        new TextEncoder().encode(readFileSync(auth.seedFile, 'utf8').trim()),
      ),
    });
    clients.push(listener);
    const events = listener.subscribe(agentSubjects(HOST).state);
    await listener.flush();
    await stack.stopControlPlane();
    docker('stop', '-t', '1', containerId!);
    for await (const message of events) {
      const event = JSON.parse(message.string()) as { shardId: string; state: string };
      if (event.shardId === shardId && event.state === 'EXITED') break;
    }
    await startControlPlane();
    // The agent reconciles once an hour here (Stack): only the ask at start can settle it.
    const exited = await waitForState(shardId, 'EXITED');
    assert.match(exited.failureReason ?? '', /found stopped by reconciliation/);
    assert.equal(exited.gpus.filter((gpu) => gpu.releasedAt === null).length, 0, 'released');
  });

  it('a message whose hostId is not its subject host is dropped: nothing changes', async () => {
    const other = await clientOf(OTHER);
    const register: RegisterRequest = {
      protocolVersion: PROTOCOL_VERSION,
      hostId: OTHER,
      host: {
        hostId: OTHER,
        name: 'other',
        labels: {},
        agentVersion: '0.1.0',
        driverVersion: '1',
        cudaVersion: '12.0',
        simulated: true,
        contextOverheadBytes: 0,
      },
      gpus: [
        { uuid: `GPU-${OTHER}-0`, index: 0, model: 'Other GPU', totalBytes: 8 * GiB, usedBytes: 0 },
      ],
      runningShards: [],
    };
    const reply = decodeMessage(
      registerReplySchema,
      (
        await other.request(agentSubjects(OTHER).register, JSON.stringify(register), {
          timeout: 5000,
        })
      ).data,
    );
    assert.ok(reply.ok && reply.message.accepted, JSON.stringify(reply));

    // HOST's agent may publish only on its own subjects: it forges the body instead.
    const forger = await clientOf(HOST);
    const forged: Heartbeat = {
      protocolVersion: PROTOCOL_VERSION,
      hostId: OTHER,
      sentAt: new Date().toISOString(),
      sequence: 0,
      gpus: [{ uuid: `GPU-${OTHER}-0`, usedBytes: 5 * GiB }],
      shards: [],
    };
    forger.publish(agentSubjects(HOST).heartbeat, JSON.stringify(forged));
    forger.publish(
      agentSubjects(HOST).state,
      JSON.stringify({
        protocolVersion: PROTOCOL_VERSION,
        hostId: OTHER,
        eventId: randomUUID(),
        shardId: kept.id,
        state: 'VANISHED',
        at: new Date().toISOString(),
      }),
    );
    await forger.flush();
    await waitFor('both forgeries to be counted', async () => {
      const metrics = await stack.metrics();
      return /kind="heartbeat",outcome="host_mismatch"\} 1/.test(metrics) &&
        /kind="state",outcome="host_mismatch"\} 1/.test(metrics)
        ? true
        : undefined;
    });
    const { host } = await stack.graphql<{ host: { gpus: { used: { bytes: string } }[] } }>(
      `query ($id: ID!) { host(id: $id) { gpus { used { bytes } } } }`,
      { id: OTHER },
    );
    assert.equal(host.gpus[0]!.used.bytes, '0');
    assert.equal((await shard(kept.id)).state, 'RUNNING');
  });

  it('malformed messages are counted and dropped; a bad register is refused; the handler goes on', async () => {
    const client = await clientOf(HOST);
    const subjects = agentSubjects(HOST);
    client.publish(subjects.heartbeat, new Uint8Array([0xff, 0x00, 0xfe]));
    client.publish(subjects.state, '{"protocolVersion":1,"hostId":"x"}');
    client.publish(subjects.reconcile, '[]');
    const refused = decodeMessage(
      registerReplySchema,
      (await client.request(subjects.register, 'not json', { timeout: 5000 })).data,
    );
    assert.ok(refused.ok && !refused.message.accepted, JSON.stringify(refused));
    assert.equal(!refused.message.accepted && refused.message.error.code, 'INVALID_REQUEST');
    await waitFor('the malformed messages to be counted', async () => {
      const metrics = await stack.metrics();
      return ['heartbeat', 'state', 'reconcile', 'register'].every((kind) =>
        metrics.includes(`gpushards_agent_messages_total{kind="${kind}",outcome="undecodable"} 1`),
      )
        ? true
        : undefined;
    });
    // Still handling the agent's messages.
    const before = Date.now();
    await agent.reconcileNow();
    await waitFor('a heartbeat after the malformed ones', async () => {
      const { host } = await stack.graphql<{ host: { lastHeartbeatAt: string } }>(
        `query ($id: ID!) { host(id: $id) { lastHeartbeatAt } }`,
        { id: HOST },
      );
      return Date.parse(host.lastHeartbeatAt) > before ? true : undefined;
    });
    assert.equal((await shard(kept.id)).state, 'RUNNING');
  });

  it('two control planes share the agents messages through the queue group: each handled once', async () => {
    await stack.stopAgent(HOST);
    const replica = await stack.startReplica({
      nats: { servers: [nats.url], auth: nats.controlPlane },
    });
    const handled = async () => {
      const counts = await Promise.all(
        [stack.controlPlane, replica].map(async (controlPlane) => {
          const match =
            /gpushards_agent_messages_total\{kind="heartbeat",outcome="handled"\} (\d+)/.exec(
              await stack.metrics(controlPlane),
            );
          return Number(match?.[1] ?? 0);
        }),
      );
      return counts as [number, number];
    };
    const [main, second] = await handled();
    const client = await clientOf(HOST);
    const sent = 20;
    for (let sequence = 0; sequence < sent; sequence++) {
      const beat: Heartbeat = {
        protocolVersion: PROTOCOL_VERSION,
        hostId: HOST,
        sentAt: new Date().toISOString(),
        sequence,
        gpus: [],
        shards: [],
      };
      client.publish(agentSubjects(HOST).heartbeat, JSON.stringify(beat));
    }
    await client.flush();
    const after = await waitFor('every heartbeat to be handled', async () => {
      const counts = await handled();
      return counts[0] - main + counts[1] - second >= sent ? counts : undefined;
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(await handled(), after, 'none handled twice');
    assert.equal(after[0] - main + after[1] - second, sent);
    assert.ok(
      after[0] > main && after[1] > second,
      `both took a share: ${after} from ${[main, second]}`,
    );
  });
});

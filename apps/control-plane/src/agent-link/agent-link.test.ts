import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import {
  PROTOCOL_VERSION,
  agentSubjects,
  type Command,
  type CommandReply,
  type ShardLaunchSpec,
} from '@gpushards/protocol';
import { pino } from 'pino';
import { postGraphql, type GraphqlResponse } from '../testing/api-test-harness.js';
import { ADMIN_TOKEN_FILE } from '../auth/admin-token.bootstrap.js';
import { createControlPlane, type ControlPlane } from '../control-plane.js';
import { PrismaService } from '../database/index.js';
import {
  gpuUuidOf,
  heartbeat,
  MiB,
  registerRequest,
  stateEvent,
} from '../testing/fleet-fixtures.js';
import { createTestDatabase, type TestDatabase } from '../testing/index.js';
import { AgentCommandClient, CommandRefusedError } from './agent-command-client.js';
import { agentLinkFromEnv } from './agent-link-options.js';
import { AgentMessagesService, INVALID_REGISTER_REQUEST } from './agent-messages.service.js';
import { CommandNotDeliveredError } from './agent-transport.js';
import { InProcessAgentHub, type InProcessAgentLink } from './in-process-agent-hub.js';
import { readRevocationFile } from './nats-host-credentials.js';

/**
 * The control plane's side of the agent link on the in-process hub, with a scripted agent on
 * the other side (the real agent over NATS and in-process: test/integration).
 */

const silent = pino({ level: 'silent' });

class LinkUnavailableError extends Error {
  override name = 'LinkUnavailableError';
}

/** An agent's side of the hub that records commands and answers each as `answer` says. */
class ScriptedAgent {
  readonly commands: Command[] = [];
  restoredCount = 0;
  answer: (command: Command) => Promise<CommandReply> = async (command) => ok(command);

  constructor(readonly link: InProcessAgentLink) {}

  async start(): Promise<void> {
    await this.link.connect();
    await this.link.onCommand((command) => {
      this.commands.push(command);
      return this.answer(command);
    });
    this.link.onRestored(() => this.restoredCount++);
  }

  ofType<T extends Command['type']>(type: T): Extract<Command, { type: T }>[] {
    return this.commands.filter((c): c is Extract<Command, { type: T }> => c.type === type);
  }
}

function ok(command: Command): CommandReply {
  const header = {
    protocolVersion: PROTOCOL_VERSION,
    hostId: command.hostId,
    commandId: command.commandId,
    ok: true,
  } as const;
  switch (command.type) {
    case 'launch':
      return { ...header, result: { type: 'launch', state: 'RUNNING', containerId: 'c-1' } };
    case 'stop':
      return { ...header, result: { type: 'stop', wasRunning: true } };
    case 'delete':
      return { ...header, result: { type: 'delete', removed: true } };
    case 'resize':
      return { ...header, result: { type: 'resize', gpus: command.gpus } };
    case 'reconcile':
      return { ...header, result: { type: 'reconcile' } };
    case 'suspend':
    case 'resume':
      return { ...header, result: { type: command.type, memory: 'resident' } };
  }
}

async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

interface Running {
  readonly controlPlane: ControlPlane;
  graphql<T>(query: string, variables?: Record<string, unknown>): Promise<GraphqlResponse<T>>;
  metrics(): Promise<string>;
}

async function startControlPlane(
  database: TestDatabase,
  dataDir: string,
  hub: InProcessAgentHub,
): Promise<Running> {
  const controlPlane = await createControlPlane({
    dataDir,
    database: database.config,
    port: 0,
    logLevel: 'silent',
    operatorOutput: new Writable({ write: (_chunk, _encoding, done) => done() }),
    link: { inProcess: hub, commands: { timeoutMs: 2000, attempts: 2, retryDelayMs: 50 } },
  });
  const token = (await readFile(join(dataDir, ADMIN_TOKEN_FILE), 'utf8')).trim();
  return {
    controlPlane,
    graphql: (query, variables = {}) =>
      postGraphql(controlPlane.graphqlUrl, query, variables, token),
    metrics: async () => (await fetch(`${controlPlane.url}/metrics`)).text(),
  };
}

function data<T>(response: GraphqlResponse<T>): T {
  assert.equal(response.errors, undefined, JSON.stringify(response.errors));
  return response.data!;
}

const HOST = 'inproc-1';

describe('agent link on the in-process hub (PGlite)', () => {
  let database: TestDatabase;
  let dataDir: string;
  let hub: InProcessAgentHub;
  let cp: Running;
  let agent: ScriptedAgent;
  let teamId: string;

  before(async () => {
    database = await createTestDatabase('pglite');
    await database.prisma.close();
    dataDir = await mkdtemp(join(tmpdir(), 'gpushards-link-test-'));
    hub = new InProcessAgentHub({
      unavailableError: (message) => new LinkUnavailableError(message),
    });
    cp = await startControlPlane(database, dataDir, hub);
    agent = new ScriptedAgent(hub.connectAgent(HOST));
    await agent.start();
    const created = data(
      await cp.graphql<{ createTeam: { id: string } }>(
        `mutation { createTeam(name: "vision") { id } }`,
      ),
    );
    teamId = created.createTeam.id;
    data(
      await cp.graphql(
        `mutation ($teamId: ID!) { setQuotaPolicy(teamId: $teamId, input: {maxTotal: "1t", maxShards: 100, maxPerShard: "1t"}) { id } }`,
        { teamId },
      ),
    );
  });

  after(async () => {
    await agent?.link.close();
    await cp?.controlPlane.close();
    await database?.cleanup();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  const shardState = async (id: string) =>
    data(
      await cp.graphql<{ shard: { state: string } }>(
        `query ($id: ID!) { shard(id: $id) { state } }`,
        { id },
      ),
    ).shard.state;

  it('register: the host and its GPUs appear in hosts; the reply carries the desired state', async () => {
    const reply = await agent.link.register(registerRequest(HOST, { gpus: 2 }));
    assert.equal(reply.accepted, true);
    assert.ok(reply.accepted && reply.desired.length === 0 && reply.stoppedShardIds.length === 0);
    const { hosts } = data(
      await cp.graphql<{
        hosts: { edges: { node: { id: string; state: string; gpus: { uuid: string }[] } }[] };
      }>(`query { hosts { edges { node { id state gpus { uuid } } } } }`),
    );
    assert.deepEqual(
      hosts.edges.map((edge) => edge.node),
      [
        {
          id: HOST,
          state: 'ONLINE',
          gpus: [{ uuid: gpuUuidOf(HOST, 0) }, { uuid: gpuUuidOf(HOST, 1) }],
        },
      ],
    );
  });

  it('heartbeat: used memory lands on the GPUs', async () => {
    await agent.link.heartbeat(
      heartbeat(HOST, new Date(), [], [{ uuid: gpuUuidOf(HOST, 0), usedBytes: 300 * MiB }]),
    );
    await waitFor('GPU 0 used bytes', async () => {
      const { host } = data(
        await cp.graphql<{ host: { gpus: { used: { bytes: string } }[] } }>(
          `query { host(id: "${HOST}") { gpus { used { bytes } } } }`,
        ),
      );
      return host.gpus[0]!.used.bytes === String(300 * MiB) ? true : undefined;
    });
  });

  it('createShard sends a launch; state events move it; heartbeats write usage samples; stopShard sends a stop', async () => {
    const created = data(
      await cp.graphql<{ createShard: { id: string; state: string } }>(
        `mutation ($input: CreateShardInput!) { createShard(input: $input) { id state } }`,
        { input: { teamId, name: 'train', image: 'example/train:1', memoryPerGpu: '2g' } },
      ),
    ).createShard;
    assert.equal(created.state, 'PLACED');
    const launch = await waitFor('the launch command', () =>
      agent.ofType('launch').find((c) => c.shard.shardId === created.id),
    );
    assert.equal(launch.hostId, HOST);
    assert.equal(launch.shard.image, 'example/train:1');
    assert.equal(launch.shard.gpus.length, 1);

    await agent.link.publishState(
      stateEvent(HOST, created.id, 'RUNNING', new Date(), { containerId: 'c-1' }),
    );
    await waitFor('RUNNING', async () =>
      (await shardState(created.id)) === 'RUNNING' ? true : undefined,
    );

    const gpu = launch.shard.gpus[0]!.uuid;
    await agent.link.heartbeat(
      heartbeat(HOST, new Date(), [
        { shardId: created.id, usedBytesPerGpu: [{ gpuUuid: gpu, usedBytes: 64 * MiB }] },
      ]),
    );
    const prisma = cp.controlPlane.app.get(PrismaService);
    await waitFor('a usage sample', async () =>
      (await prisma.usageSample.count({ where: { shardId: created.id } })) === 1 ? true : undefined,
    );

    data(
      await cp.graphql(`mutation ($id: ID!) { stopShard(id: $id, graceSeconds: 3) { state } }`, {
        id: created.id,
      }),
    );
    const stop = await waitFor('the stop command', () =>
      agent.ofType('stop').find((c) => c.shardId === created.id),
    );
    assert.equal(stop.graceSeconds, 3);
    await agent.link.publishState(
      stateEvent(HOST, created.id, 'STOPPED', new Date(), { exitCode: 0 }),
    );
    await waitFor('STOPPED', async () =>
      (await shardState(created.id)) === 'STOPPED' ? true : undefined,
    );
  });

  it('undecodable or mismatched messages are counted and dropped; a bad register gets a rejection', async () => {
    const messages = cp.controlPlane.app.get(AgentMessagesService);
    const subjects = agentSubjects(HOST);
    assert.equal(
      await messages.handle({ subject: subjects.heartbeat, data: new Uint8Array([0xff, 0xfe]) }),
      undefined,
    );
    assert.equal(
      await messages.handle({ subject: subjects.state, data: '{"protocolVersion":1}' }),
      undefined,
    );
    assert.equal(
      await messages.handle({ subject: 'gpushards.agent.a.b.c', data: '{}' }),
      undefined,
    );
    const otherHost = heartbeat(
      'someone-else',
      new Date(),
      [],
      [{ uuid: gpuUuidOf(HOST, 0), usedBytes: 1 }],
    );
    assert.equal(
      await messages.handle({ subject: subjects.heartbeat, data: JSON.stringify(otherHost) }),
      undefined,
    );
    const rejection = JSON.parse(
      (await messages.handle({ subject: subjects.register, data: 'not json' }))!,
    );
    assert.equal(rejection.accepted, false);
    assert.equal(rejection.hostId, HOST);
    assert.equal(rejection.error.code, INVALID_REGISTER_REQUEST);
    const tooNew = JSON.parse(
      (await messages.handle({ subject: subjects.register, data: '{"protocolVersion":99}' }))!,
    );
    assert.equal(tooNew.error.code, 'AGENT_UNSUPPORTED');

    const { host } = data(
      await cp.graphql<{ host: { gpus: { used: { bytes: string } }[] } }>(
        `query { host(id: "${HOST}") { gpus { used { bytes } } } }`,
      ),
    );
    assert.equal(
      host.gpus[0]!.used.bytes,
      String(300 * MiB),
      'the mismatched heartbeat changed nothing',
    );
    const metrics = await cp.metrics();
    assert.match(
      metrics,
      /gpushards_agent_messages_total\{kind="heartbeat",outcome="undecodable"\} 1/,
    );
    assert.match(metrics, /gpushards_agent_messages_total\{kind="state",outcome="undecodable"\} 1/);
    assert.match(
      metrics,
      /gpushards_agent_messages_total\{kind="unknown",outcome="invalid_subject"\} 1/,
    );
    assert.match(
      metrics,
      /gpushards_agent_messages_total\{kind="heartbeat",outcome="host_mismatch"\} 1/,
    );
    assert.match(
      metrics,
      /gpushards_agent_messages_total\{kind="register",outcome="undecodable"\} 2/,
    );
    assert.match(
      metrics,
      /gpushards_agent_messages_total\{kind="heartbeat",outcome="handled"\} [1-9]/,
    );
  });

  it('a reconcile from a host that never registered is not answered (the agent retries)', async () => {
    const stranger = new ScriptedAgent(hub.connectAgent('stranger'));
    await stranger.start();
    try {
      await assert.rejects(
        stranger.link.reconcile({
          protocolVersion: PROTOCOL_VERSION,
          hostId: 'stranger',
          containers: [],
        }),
        LinkUnavailableError,
      );
    } finally {
      await stranger.link.close();
    }
  });

  it('a restarted control plane gets connected agents to register again; meanwhile requests fail as unavailable', async () => {
    await cp.controlPlane.close();
    await assert.rejects(
      agent.link.register(registerRequest(HOST, { gpus: 2 })),
      LinkUnavailableError,
    );
    const before = agent.restoredCount;
    cp = await startControlPlane(database, dataDir, hub);
    assert.equal(agent.restoredCount, before + 1);
    const reply = await agent.link.register(registerRequest(HOST, { gpus: 2 }));
    assert.equal(reply.accepted, true);
  });
});

describe('AgentCommandClient on the in-process hub', () => {
  const hub = new InProcessAgentHub();
  const client = new AgentCommandClient(
    hub,
    { timeoutMs: 100, attempts: 3, retryDelayMs: 10 },
    silent,
  );
  const spec: ShardLaunchSpec = {
    shardId: 's-1',
    teamId: 't-1',
    name: 'train',
    image: 'example/train:1',
    env: {},
    gpus: [{ uuid: 'GPU-0', limitBytes: 1024 }],
  };
  let agent: ScriptedAgent;

  before(async () => {
    agent = new ScriptedAgent(hub.connectAgent('cmd-host'));
    await agent.start();
  });
  after(() => agent.link.close());

  it('an unanswered attempt is sent again with the same command id', async () => {
    agent.commands.length = 0;
    let calls = 0;
    let sentAgain!: () => void;
    const retried = new Promise<void>((resolve) => (sentAgain = resolve));
    agent.answer = async (command) => {
      calls++;
      // The first attempt is answered only once the client gave it up and sent it again.
      if (calls === 1) await retried;
      else sentAgain();
      return ok(command);
    };
    await client.launch('cmd-host', spec);
    assert.equal(agent.commands.length, 2);
    assert.equal(agent.commands[0]!.commandId, agent.commands[1]!.commandId);
  });

  it('a refusal is not retried', async () => {
    agent.commands.length = 0;
    agent.answer = async (command) => ({
      protocolVersion: PROTOCOL_VERSION,
      hostId: command.hostId,
      commandId: command.commandId,
      ok: false,
      error: { code: 'BELOW_USAGE', message: 'uses more' },
    });
    await assert.rejects(
      client.resize('cmd-host', 's-1', [{ uuid: 'GPU-0', limitBytes: 1 }]),
      (error: unknown) => {
        assert.ok(error instanceof CommandRefusedError);
        assert.equal(error.code, 'BELOW_USAGE');
        return true;
      },
    );
    assert.equal(agent.commands.length, 1);
  });

  it('a host without an agent: not delivered after every attempt', async () => {
    const started = Date.now();
    await assert.rejects(client.stop('nobody', 's-1', 5), CommandNotDeliveredError);
    assert.ok(Date.now() - started >= 30, 'waited between attempts');
  });

  it('the agent side refuses a command for another host, as over NATS', async () => {
    const command = {
      protocolVersion: PROTOCOL_VERSION,
      hostId: 'other',
      commandId: randomUUID(),
      type: 'delete',
      shardId: 's-1',
    };
    const reply = JSON.parse(
      (await hub.sendCommand('cmd-host', JSON.stringify(command), 1000)) as string,
    );
    assert.equal(reply.ok, false);
    assert.equal(reply.error.code, 'WRONG_HOST');
    const garbage = JSON.parse(
      (await hub.sendCommand('cmd-host', '{"type":"explode"}', 1000)) as string,
    );
    assert.equal(garbage.error.code, 'INVALID_COMMAND');
    assert.equal(garbage.commandId, null);
  });
});

describe('agentLinkFromEnv', () => {
  it('no GPUSHARDS_NATS_URL: no link', () => {
    assert.equal(agentLinkFromEnv({}), undefined);
  });

  it('reads servers, an nkey seed file and command delivery', () => {
    assert.deepEqual(
      agentLinkFromEnv(
        {
          GPUSHARDS_NATS_URL: 'nats://a:4222,nats://b:4222',
          GPUSHARDS_NATS_NKEY_SEED_FILE: 'cp.nk',
          GPUSHARDS_NATS_COMMAND_TIMEOUT_SECONDS: '5',
          GPUSHARDS_NATS_COMMAND_ATTEMPTS: '4',
        },
        '/etc/gpushards',
      ),
      {
        nats: {
          servers: ['nats://a:4222', 'nats://b:4222'],
          auth: { kind: 'nkey', seedFile: '/etc/gpushards/cp.nk' },
        },
        commands: { timeoutMs: 5000, attempts: 4 },
      },
    );
  });

  it('a JWT deployment: .creds and the revocation file removeHost pushes with', async () => {
    const link = agentLinkFromEnv(
      {
        GPUSHARDS_NATS_URL: 'nats://a:4222',
        GPUSHARDS_NATS_CREDS: 'control-plane.creds',
        GPUSHARDS_NATS_REVOCATION_FILE: 'control-plane-revocation.json',
      },
      '/etc/gpushards',
    );
    assert.ok(link !== undefined && 'nats' in link);
    assert.deepEqual(link.nats, {
      servers: ['nats://a:4222'],
      auth: { kind: 'creds', credsFile: '/etc/gpushards/control-plane.creds' },
      revocationFile: '/etc/gpushards/control-plane-revocation.json',
    });
    // A revocation file that cannot serve stops the start, naming what is wrong and no secret.
    const dir = await mkdtemp(join(tmpdir(), 'gpushards-revocation-'));
    try {
      const file = join(dir, 'revocation.json');
      await writeFile(
        file,
        JSON.stringify({
          account: 'x',
          signingKeySeed: 'SUSECRETSEED',
          systemCreds: 'no',
          agentUsers: {},
        }),
      );
      assert.throws(
        () => readRevocationFile(file),
        (error: Error) =>
          /signingKeySeed: must be an operator nkey seed/.test(error.message) &&
          /systemCreds: must be a \.creds text/.test(error.message) &&
          !error.message.includes('SUSECRETSEED'),
      );
      assert.throws(() => readRevocationFile(join(dir, 'none.json')), /cannot be read/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('names every bad variable and never echoes the password', () => {
    assert.throws(
      () =>
        agentLinkFromEnv({
          GPUSHARDS_NATS_URL: 'http://x',
          GPUSHARDS_NATS_PASSWORD: 'hunter2',
          GPUSHARDS_NATS_COMMAND_ATTEMPTS: '0',
        }),
      (error: Error) => {
        assert.match(error.message, /GPUSHARDS_NATS_URL/);
        assert.match(error.message, /GPUSHARDS_NATS_COMMAND_ATTEMPTS/);
        assert.doesNotMatch(error.message, /hunter2/);
        return true;
      },
    );
    assert.throws(
      () => agentLinkFromEnv({ GPUSHARDS_NATS_URL: 'nats://a:1', GPUSHARDS_NATS_PASSWORD: 'x' }),
      /go together/,
    );
    assert.throws(
      () => agentLinkFromEnv({ GPUSHARDS_NATS_NKEY_SEED_FILE: 'x' }),
      /without GPUSHARDS_NATS_URL/,
    );
  });
});

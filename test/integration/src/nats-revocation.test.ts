import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  startNatsServer,
  type TestNatsServer,
} from '../../../apps/agent/dist/testing/nats-server.js';
import {
  freePort,
  startBackground,
  type Background,
} from '../../../apps/agent/dist/testing/processes.js';
import { REPO_ROOT } from '../../../apps/agent/dist/testing/paths.js';
import {
  PROTOCOL_VERSION,
  agentInboxPrefix,
  agentSubjects,
  decodeMessage,
  registerReplySchema,
  type RegisterRequest,
} from '@gpushards/protocol';
import {
  connect,
  credsAuthenticator,
  type NatsConnection,
  type Status,
} from '@nats-io/transport-node';

import { GiB, Stack, waitFor } from './support/stack.js';

const GONE = `it-gone-${process.pid}`;
const STAYS = `it-stays-${process.pid}`;

/**
 * removeHost takes the host's NATS user away, in the decentralised (JWT) setup deploy/nats
 * writes with --auth jwt: the control plane re-signs the account with the user revoked and
 * pushes it to a real nats-server, which drops the agent's connection and refuses it from then
 * on (after a server restart too); another agent and the control plane keep working.
 */
for (const kind of ['postgres', 'pglite'] as const) {
  describe(`a removed host's NATS credentials stop working (--auth jwt, ${kind})`, () => {
    let stack: Stack;
    let nats: TestNatsServer;
    const clients: NatsConnection[] = [];

    /** A bare client logged in as `hostId`'s agent; `statuses` collects what nats.js reports. */
    const agentClient = async (hostId: string, reconnect = true) => {
      const auth = nats.agent(hostId);
      assert.equal(auth.kind, 'creds');
      const statuses: string[] = [];
      const nc = await connect({
        servers: nats.url,
        inboxPrefix: agentInboxPrefix(hostId),
        authenticator: credsAuthenticator(readFileSync(auth.credsFile)),
        ...(reconnect ? { reconnectTimeWait: 100 } : { reconnect: false }),
      });
      clients.push(nc);
      void (async () => {
        for await (const status of nc.status() as AsyncIterable<Status>) {
          statuses.push(status.type === 'error' ? status.error.message : status.type);
        }
      })();
      return { nc, statuses };
    };
    const register = async (nc: NatsConnection, hostId: string) => {
      const request: RegisterRequest = {
        protocolVersion: PROTOCOL_VERSION,
        hostId,
        host: {
          hostId,
          name: hostId,
          labels: {},
          agentVersion: '0.1.0',
          driverVersion: '1',
          cudaVersion: '12.0',
          simulated: true,
          contextOverheadBytes: 0,
        },
        gpus: [
          {
            uuid: `GPU-${hostId}-0`,
            index: 0,
            model: 'Test GPU',
            totalBytes: 8 * GiB,
            usedBytes: 0,
          },
        ],
        runningShards: [],
      };
      const reply = decodeMessage(
        registerReplySchema,
        (
          await nc.request(agentSubjects(hostId).register, JSON.stringify(request), {
            timeout: 5000,
          })
        ).data,
      );
      return reply.ok && reply.message.accepted;
    };
    const revocations = async (outcome: string) => {
      const text = await stack.metrics();
      const line = text
        .split('\n')
        .find((l) =>
          l.startsWith(`gpushards_host_credential_revocations_total{outcome="${outcome}"}`),
        );
      return line === undefined ? 0 : Number(line.split(' ').pop());
    };

    before(async () => {
      nats = await startNatsServer([GONE, STAYS], 'jwt');
      assert.ok(nats.revocationFile, 'the generator wrote the revocation file');
      stack = await Stack.start(`revoke-${kind}`, kind, false);
      await stack.startControlPlane({
        nats: {
          servers: [nats.url],
          auth: nats.controlPlane,
          revocationFile: nats.revocationFile,
        },
      });
    });

    after(async () => {
      for (const client of clients) await client.close().catch(() => undefined);
      await stack?.close([]);
      await nats?.stop();
    });

    it('removeHost revokes its NATS user at once and for good; the others keep theirs', async () => {
      const gone = await agentClient(GONE);
      const stays = await agentClient(STAYS);
      assert.ok(await register(gone.nc, GONE), 'registered over NATS with its JWT');
      assert.ok(await register(stays.nc, STAYS));
      assert.equal(await revocations('revoked'), 0, 'nothing removed yet: nothing pushed');

      await stack.graphql(`mutation ($id: ID!) { drainHost(id: $id) { id } }`, { id: GONE });
      await stack.graphql(`mutation ($id: ID!) { removeHost(id: $id) { id } }`, { id: GONE });
      assert.equal(await revocations('revoked'), 1);

      // The server drops the connection and refuses it again (nats.js keeps trying).
      await waitFor('the removed agent to be cut off', () =>
        gone.statuses.includes('User Authentication Revoked') &&
        gone.statuses.includes('Authorization Violation')
          ? true
          : undefined,
      );
      await assert.rejects(agentClient(GONE, false), /Authorization Violation/);
      // The other agent and the control plane are untouched.
      assert.ok(await register(stays.nc, STAYS), 'another agent still talks to the control plane');
      assert.ok(
        !stays.statuses.some((s) => /revoked|authorization/i.test(s)),
        stays.statuses.join(),
      );

      // The resolver keeps the revoked account: a restarted server refuses the user too.
      await nats.restart();
      await assert.rejects(agentClient(GONE, false), /Authorization Violation/);
      const fresh = await agentClient(STAYS, false);
      // Once the control plane has reconnected too.
      await waitFor('a registration after the restart', () =>
        register(fresh.nc, STAYS).then(
          (ok) => ok || undefined,
          () => undefined,
        ),
      );
      assert.equal(await revocations('failed'), 0);
    });
  });
}

interface ClusterGenerator {
  writeConfig(
    out: string,
    hostIds: string[],
    auth: 'jwt',
  ): Promise<{ credentials: Record<string, string> }>;
  writeClusterConfig(
    out: string,
    servers: { name: string; host: string; port: number; routePort: number }[],
    auth: 'jwt',
  ): Record<string, string>;
}

/**
 * The same across a cluster of three servers (--auth jwt --cluster, each with its own resolver
 * folder): the account pushed to the server the control plane reaches goes on to the others,
 * which drop and refuse the removed agent connected to one of them.
 */
describe("a removed host's NATS credentials stop working on every server of a cluster", () => {
  const dir = mkdtempSync(join(tmpdir(), 'gpushards-nats-cluster-'));
  const servers: { name: string; host: string; port: number; routePort: number }[] = [];
  const running: Background[] = [];
  const clients: NatsConnection[] = [];
  let stack: Stack;
  let env: (user: string) => Record<string, string>;

  const connectAs = async (user: string, port: number, reconnect = true) => {
    const nc = await connect({
      servers: `nats://127.0.0.1:${port}`,
      authenticator: credsAuthenticator(readFileSync(env(user).GPUSHARDS_NATS_CREDS!)),
      ...(user.startsWith('agent-')
        ? { inboxPrefix: agentInboxPrefix(user.slice('agent-'.length)) }
        : {}),
      ...(reconnect ? { reconnectTimeWait: 100 } : { reconnect: false }),
    });
    clients.push(nc);
    return nc;
  };

  before(async () => {
    const generator = (await import(
      pathToFileURL(join(REPO_ROOT, 'deploy/nats/generate-config.mjs')).href
    )) as ClusterGenerator;
    for (const name of ['n1', 'n2', 'n3']) {
      servers.push({
        name,
        host: '127.0.0.1',
        port: await freePort(),
        routePort: await freePort(),
      });
    }
    const config = await generator.writeConfig(dir, [GONE, STAYS], 'jwt');
    const files = generator.writeClusterConfig(dir, servers, 'jwt');
    env = (user) =>
      Object.fromEntries(
        readFileSync(config.credentials[user]!, 'utf8')
          .trim()
          .split('\n')
          .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
      );
    for (const server of servers) {
      running.push(
        await startBackground('nats-server', ['-c', files[server.name]!], /Server is ready/),
      );
    }
    stack = await Stack.start('revoke-cluster', 'postgres', false);
    const cp = env('control-plane');
    await stack.startControlPlane({
      nats: {
        servers: [`nats://127.0.0.1:${servers[0]!.port}`],
        auth: { kind: 'creds', credsFile: cp.GPUSHARDS_NATS_CREDS! },
        revocationFile: cp.GPUSHARDS_NATS_REVOCATION_FILE!,
      },
    });
  });

  after(async () => {
    for (const client of clients) await client.close().catch(() => undefined);
    await stack?.close([]);
    for (const server of running) await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('removeHost through one server; the agent on another is cut off and refused by all', async () => {
    // The agent on the third server reaches the control plane on the first: routes are up.
    const gone = await connectAs(`agent-${GONE}`, servers[2]!.port);
    const statuses: string[] = [];
    void (async () => {
      for await (const status of gone.status() as AsyncIterable<Status>) {
        statuses.push(status.type === 'error' ? status.error.message : status.type);
      }
    })();
    await waitFor('a registration across the cluster', async () => {
      const request: RegisterRequest = {
        protocolVersion: PROTOCOL_VERSION,
        hostId: GONE,
        host: {
          hostId: GONE,
          name: GONE,
          labels: {},
          agentVersion: '0.1.0',
          driverVersion: '1',
          cudaVersion: '12.0',
          simulated: true,
          contextOverheadBytes: 0,
        },
        gpus: [],
        runningShards: [],
      };
      const reply = await gone
        .request(agentSubjects(GONE).register, JSON.stringify(request), { timeout: 2000 })
        .catch(() => undefined);
      if (reply === undefined) return undefined;
      const decoded = decodeMessage(registerReplySchema, reply.data);
      return decoded.ok && decoded.message.accepted ? true : undefined;
    });

    await stack.graphql(`mutation ($id: ID!) { drainHost(id: $id) { id } }`, { id: GONE });
    await stack.graphql(`mutation ($id: ID!) { removeHost(id: $id) { id } }`, { id: GONE });
    await waitFor('the agent on the third server to be cut off', () =>
      statuses.includes('User Authentication Revoked') ? true : undefined,
    );
    for (const server of servers) {
      await assert.rejects(
        connectAs(`agent-${GONE}`, server.port, false),
        /Authorization Violation/,
        server.name,
      );
    }
    const other = await connectAs(`agent-${STAYS}`, servers[1]!.port, false);
    await other.flush();
  });
});

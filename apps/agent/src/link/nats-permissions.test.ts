import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { agentInboxPrefix, agentSubjects, hostSubjects } from '@gpushards/protocol';
import { connect, type NatsConnection, type Status } from '@nats-io/transport-node';

import { startNatsServer, type TestNatsServer } from '../testing/nats-server.js';
import { waitFor } from '../testing/processes.js';
import { natsAuthenticator, type NatsAuth } from './nats-agent-link.js';

/**
 * deploy/nats's configuration, in a real nats-server: an agent's credentials reach its own
 * host's subjects and nothing of another host's, with nkey users in users.conf and with
 * decentralised JWT users (--auth jwt: the same permissions in each user's JWT).
 */
for (const auth of ['nkey', 'jwt'] as const)
  describe(`NATS permissions (deploy/nats, --auth ${auth})`, () => {
    let server: TestNatsServer;
    const connections: NatsConnection[] = [];

    async function open(
      auth: NatsAuth,
      inboxPrefix?: string,
    ): Promise<{ nc: NatsConnection; errors: string[] }> {
      const errors: string[] = [];
      const nc = await connect({
        servers: server.url,
        authenticator: natsAuthenticator(auth),
        ...(inboxPrefix ? { inboxPrefix } : {}),
      });
      connections.push(nc);
      void (async () => {
        for await (const status of nc.status() as AsyncIterable<Status>) {
          if (status.type === 'error') errors.push(status.error.message);
        }
      })();
      return { nc, errors };
    }

    before(async () => {
      server = await startNatsServer(['box-a', 'box-b'], auth);
    });

    after(async () => {
      for (const nc of connections) await nc.close().catch(() => undefined);
      await server?.stop();
    });

    it('a second agent can neither publish as the first host nor read its commands or replies', async () => {
      const controlPlane = await open(server.controlPlane);
      const heard: string[] = [];
      controlPlane.nc.subscribe('gpushards.agent.*.>', {
        callback: (_error, msg) => void heard.push(msg.subject),
      });
      await controlPlane.nc.flush();

      const intruder = await open(server.agent('box-b'), agentInboxPrefix('box-b'));
      // Publishing as box-a: the server refuses and tells the intruder.
      intruder.nc.publish(agentSubjects('box-a').heartbeat, '{}');
      await intruder.nc.flush();
      await waitFor('a publish violation', () =>
        intruder.errors.find((error) =>
          /permissions violation for publish to "gpushards\.agent\.box-a\.heartbeat"/i.test(error),
        ),
      );
      // Reading box-a's commands and box-a's inbox: both subscriptions are refused.
      const commandSub = intruder.nc.subscribe(hostSubjects('box-a').cmd);
      const inboxSub = intruder.nc.subscribe(`${agentInboxPrefix('box-a')}.>`);
      const everythingSub = intruder.nc.subscribe('gpushards.>');
      for (const [sub, subject] of [
        [commandSub, hostSubjects('box-a').cmd],
        [inboxSub, `${agentInboxPrefix('box-a')}.>`],
        [everythingSub, 'gpushards.>'],
      ] as const) {
        await assert.rejects(
          sub.closed.then((error) => {
            if (error) throw error;
          }),
          (error: Error) =>
            error.message
              .toLowerCase()
              .includes(`permissions violation for subscription to "${subject}"`),
          subject,
        );
      }
      // Its own subjects work, and the control plane hears only those.
      intruder.nc.publish(agentSubjects('box-b').heartbeat, '{}');
      await intruder.nc.flush();
      await waitFor('box-b heartbeat at the control plane', () =>
        heard.find((s) => s === agentSubjects('box-b').heartbeat),
      );
      assert.deepEqual(heard, [agentSubjects('box-b').heartbeat]);
    });

    it('an agent receives its own commands and answers them without a publish grant on inboxes', async () => {
      const controlPlane = await open(server.controlPlane);
      const agent = await open(server.agent('box-a'), agentInboxPrefix('box-a'));
      agent.nc.subscribe(hostSubjects('box-a').cmd, {
        callback: (_error, msg) => void msg.respond('done'),
      });
      await agent.nc.flush();
      const reply = await controlPlane.nc.request(hostSubjects('box-a').cmd, 'do', {
        timeout: 5000,
      });
      assert.equal(reply.string(), 'done');
      // The control plane may not publish as an agent either.
      controlPlane.nc.publish(agentSubjects('box-a').state, '{}');
      await controlPlane.nc.flush();
      await waitFor('the control plane publish violation', () =>
        controlPlane.errors.find((error) => /permissions violation for publish/i.test(error)),
      );
      assert.deepEqual(agent.errors, []);
    });
  });

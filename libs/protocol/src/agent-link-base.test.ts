import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { AgentLinkBase } from './agent-link-base.js';
import {
  heartbeatSchema,
  reconcileReplySchema,
  reconcileRequestSchema,
  registerReplySchema,
  registerRequestSchema,
  shardStateEventSchema,
  shardWakeSchema,
} from './agent-messages.js';
import { encodeMessage } from './codec.js';
import * as examples from './testing/fixtures.js';
import { agentSubjects } from './subjects.js';

/** A transport that records what it carries and answers requests from `answers`. */
class RecordingLink extends AgentLinkBase {
  readonly published: [string, string][] = [];
  readonly sent: [string, string][] = [];

  constructor(
    hostId: string,
    private readonly answers: Record<string, string>,
  ) {
    super(hostId);
  }

  linkBack(): void {
    this.restored();
  }

  protected override publish(subject: string, data: string): void {
    this.published.push([subject, data]);
  }

  protected override async send(subject: string, data: string): Promise<string> {
    this.sent.push([subject, data]);
    const answer = this.answers[subject];
    if (answer === undefined) throw new Error(`no answer on ${subject}`);
    return answer;
  }
}

const subjects = agentSubjects(examples.HOST_ID);

describe('AgentLinkBase', () => {
  test('requests on the host subjects and decodes the answers', async () => {
    const link = new RecordingLink(examples.HOST_ID, {
      [subjects.register]: encodeMessage(registerReplySchema, examples.registerAccepted),
      [subjects.reconcile]: encodeMessage(reconcileReplySchema, examples.reconcileReply),
    });
    assert.deepEqual(await link.register(examples.registerRequest), examples.registerAccepted);
    assert.deepEqual(await link.reconcile(examples.reconcileRequest), examples.reconcileReply);
    assert.deepEqual(link.sent, [
      [subjects.register, encodeMessage(registerRequestSchema, examples.registerRequest)],
      [subjects.reconcile, encodeMessage(reconcileRequestSchema, examples.reconcileRequest)],
    ]);
  });

  test('an answer for another host is refused; the transport’s own error passes as it is', async () => {
    const link = new RecordingLink(examples.HOST_ID, {
      [subjects.register]: encodeMessage(registerReplySchema, {
        ...examples.registerAccepted,
        hostId: 'other-host',
      }),
    });
    await assert.rejects(
      link.register(examples.registerRequest),
      /for host "other-host", not "gpu-box-07"/,
    );
    await assert.rejects(
      link.reconcile(examples.reconcileRequest),
      /^Error: no answer on gpushards\.agent\.gpu-box-07\.reconcile$/,
    );
  });

  test('publishes heartbeats, state events and wakes encoded, and tells listeners the link is back', async () => {
    const link = new RecordingLink(examples.HOST_ID, {});
    const wake = {
      protocolVersion: examples.heartbeat.protocolVersion,
      hostId: examples.HOST_ID,
      shardId: 'shard_01HZX3',
      at: '2024-05-01T12:00:00.000Z',
      requests: 3,
    };
    await link.heartbeat(examples.heartbeat);
    await link.publishState(examples.pullingEvent);
    await link.publishWake(wake);
    assert.deepEqual(link.published, [
      [subjects.heartbeat, encodeMessage(heartbeatSchema, examples.heartbeat)],
      [subjects.state, encodeMessage(shardStateEventSchema, examples.pullingEvent)],
      [subjects.wake, encodeMessage(shardWakeSchema, wake)],
    ]);
    let told = 0;
    link.onRestored(() => told++);
    link.onRestored(() => told++);
    link.linkBack();
    assert.equal(told, 2);
  });
});

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { encodeMessage } from './codec.js';
import * as examples from './testing/fixtures.js';
import { registerReplySchema, registerRequestSchema } from './agent-messages.js';
import { requestMessage } from './request.js';
import { agentSubjects } from './subjects.js';

const subject = agentSubjects(examples.HOST_ID).register;

function register(answer: Uint8Array | string, hostId = examples.HOST_ID) {
  const sent: [string, string][] = [];
  const result = requestMessage(
    async (to, data) => {
      sent.push([to, data]);
      return answer;
    },
    subject,
    hostId,
    registerRequestSchema,
    examples.registerRequest,
    registerReplySchema,
  );
  return { sent, result };
}

describe('requestMessage', () => {
  test('sends the encoded request and returns the decoded reply', async () => {
    const { sent, result } = register(
      new TextEncoder().encode(encodeMessage(registerReplySchema, examples.registerAccepted)),
    );
    assert.deepEqual(await result, examples.registerAccepted);
    assert.deepEqual(sent, [
      [subject, encodeMessage(registerRequestSchema, examples.registerRequest)],
    ]);
  });

  test('an unusable reply is an error naming the subject', async () => {
    await assert.rejects(
      register('{not json').result,
      new RegExp(`the control plane's answer on ${subject.replaceAll('.', '\\.')} is unusable`),
    );
  });

  test('a reply for another host is an error', async () => {
    await assert.rejects(
      register(encodeMessage(registerReplySchema, examples.registerAccepted), 'other-host').result,
      /answered on .* for host "gpu-box-07", not "other-host"/,
    );
  });

  test("send's own errors pass through", async () => {
    const failure = new Error('no route');
    await assert.rejects(
      requestMessage(
        () => Promise.reject(failure),
        subject,
        examples.HOST_ID,
        registerRequestSchema,
        examples.registerRequest,
        registerReplySchema,
      ),
      (error) => error === failure,
    );
  });
});
